"""Where a gang goes: free GPUs by node, indexed for best fit, and topology-aware placement.

``NodeIndex`` keeps the free GPUs of the ready nodes in buckets by (GPU type, number of free
GPUs), so best fit costs O(GPUs per node) rather than O(nodes): the live cycle and the
throughput benchmark place thousands of jobs on 5,000 nodes. Buckets are insertion-ordered
dicts used as ordered sets, so ties always resolve the same way for the same snapshot.

Placement rules for one job on one GPU type (``place_gang``), all or nothing:

- **Whole job on one node** when it fits on one: the node with the fewest free GPUs that
  still holds it (best fit packs small jobs together and keeps whole nodes free).
- Otherwise instance by instance, biggest first: a node this job already uses when one has
  room (fewest nodes, the instances can talk over NVLink), else the best-fit node for
  what is *left* of the job, up to a whole node (a gang of 4x8 GPUs takes whole free nodes
  and leaves partly used ones to smaller jobs).
- ``single_node``: only the first rule. ``one_per_node``: every instance on a node of its
  own (best fit per instance).
- GPU-less instances go to a node of the job when it has one, else the least loaded node.

Nothing is changed unless the whole gang fits: a failed attempt gives back what it took.
"""

from __future__ import annotations

from collections.abc import Iterable

from services.scheduler.model import InstancePlacement, NodeCapacity, PendingJob


class NodeIndex:
    """Free GPUs of the ready nodes, bucketed by (type, free count)."""

    def __init__(self, nodes: Iterable[NodeCapacity]) -> None:
        self.nodes: dict[str, NodeCapacity] = {}
        self._buckets: dict[str, list[dict[str, None]]] = {}
        self._free: dict[str, int] = {}
        self._largest: dict[str, int] = {}
        for node in sorted(nodes, key=lambda n: n.node_id):
            self.nodes[node.node_id] = node
            if node.total_gpus <= 0:
                continue
            kind = node.gpu_type
            buckets = self._buckets.setdefault(kind, [])
            size = max(node.total_gpus, len(node.free_gpus))
            while len(buckets) <= size:
                buckets.append({})
            buckets[len(node.free_gpus)][node.node_id] = None
            self._free[kind] = self._free.get(kind, 0) + len(node.free_gpus)
            self._largest[kind] = max(self._largest.get(kind, 0), node.total_gpus)
        self._types = sorted(self._buckets, key=lambda kind: (-self._free[kind], kind))

    def types(self) -> list[str]:
        """GPU types of ready nodes, the most free GPUs (when the index was built) first."""
        return self._types

    def free(self, gpu_type: str | None = None) -> int:
        if gpu_type is None:
            return sum(self._free.values())
        return self._free.get(gpu_type, 0)

    def largest(self, gpu_type: str | None = None) -> int:
        """GPUs of the biggest ready node (of the type), free or not."""
        if gpu_type is None:
            return max(self._largest.values(), default=0)
        return self._largest.get(gpu_type, 0)

    def most_free(self, gpu_type: str) -> int:
        """The most free GPUs on any one node of the type."""
        buckets = self._buckets.get(gpu_type, [])
        for count in range(len(buckets) - 1, 0, -1):
            if buckets[count]:
                return count
        return 0

    def best_fit(self, gpu_type: str, want: int, exclude: Iterable[str] = ()) -> str | None:
        """The node of the type with the fewest free GPUs that still has ``want``."""
        buckets = self._buckets.get(gpu_type, [])
        excluded = set(exclude)
        for count in range(max(want, 1), len(buckets)):
            for node_id in buckets[count]:
                if node_id not in excluded:
                    return node_id
        return None

    def take(self, node_id: str, count: int) -> tuple[int, ...]:
        """The ``count`` lowest free GPU indices of the node, now taken."""
        node = self.nodes[node_id]
        taken = tuple(node.free_gpus[:count])
        self._rebucket(node, node.free_gpus[count:])
        return taken

    def take_exact(self, node_id: str, gpus: Iterable[int]) -> None:
        node = self.nodes[node_id]
        wanted = set(gpus)
        missing = wanted - set(node.free_gpus)
        if missing:
            raise ValueError(f"node {node_id}: GPUs {sorted(missing)} are not free")
        self._rebucket(node, [g for g in node.free_gpus if g not in wanted])

    def give(self, node_id: str, gpus: Iterable[int]) -> None:
        """GPUs come free on the node (a placement undone, a job preempted in a what-if)."""
        node = self.nodes.get(node_id)
        if node is None or node.total_gpus <= 0:
            return  # not a ready node: nothing to offer
        back = set(gpus)
        overlap = back & set(node.free_gpus)
        if overlap:
            raise ValueError(f"node {node_id}: GPUs {sorted(overlap)} given back twice")
        self._rebucket(node, sorted([*node.free_gpus, *back]))

    def _rebucket(self, node: NodeCapacity, free: list[int]) -> None:
        buckets = self._buckets[node.gpu_type]
        del buckets[len(node.free_gpus)][node.node_id]
        self._free[node.gpu_type] += len(free) - len(node.free_gpus)
        node.free_gpus = free
        while len(buckets) <= len(free):
            buckets.append({})
        buckets[len(free)][node.node_id] = None

    def least_loaded(self, prefer: Iterable[str], exclude: Iterable[str] = ()) -> str | None:
        """A node for a GPU-less instance: one the job already uses, else the least loaded."""
        for node_id in prefer:
            return node_id
        excluded = set(exclude)
        candidates = [n for n in self.nodes.values() if n.node_id not in excluded]
        best = min(candidates, key=lambda n: (n.load, n.node_id), default=None)
        return None if best is None else best.node_id


def place_gang(job: PendingJob, index: NodeIndex, gpu_type: str) -> list[InstancePlacement] | None:
    """Place every instance of ``job`` on nodes of ``gpu_type``, or nothing (see the module
    docstring for the rules); the index is updated only on success."""
    instances = sorted(
        ((t.role, i, t.gpus) for t in job.tasks for i in range(t.instances)), key=lambda item: -item[2]
    )
    need = job.gpus
    if need > index.free(gpu_type):
        return None  # the common case in a busy cluster: answered without looking at a node
    used: dict[str, None] = {}  # nodes of this job, in the order they were chosen
    taken: list[InstancePlacement] = []

    def undo() -> None:
        for placement in taken:
            if placement.gpu_indices:
                index.give(placement.node_id, placement.gpu_indices)
            index.nodes[placement.node_id].load -= 1

    def put(role: str, number: int, node_id: str, gpus: int) -> None:
        node_gpus = index.take(node_id, gpus) if gpus else ()
        index.nodes[node_id].load += 1
        used[node_id] = None
        taken.append(InstancePlacement(role, number, node_id, node_gpus))

    if need and job.topology != "one_per_node" and need <= index.largest(gpu_type):
        node_id = index.best_fit(gpu_type, need)
        if node_id is not None:
            for role, number, gpus in instances:
                put(role, number, node_id, gpus)
            return sorted(taken, key=lambda p: (p.role, p.index))
        if job.topology == "single_node":
            return None
    elif job.topology == "single_node" and need:
        return None

    remaining = need
    for role, number, gpus in instances:
        node_id = None
        if gpus == 0:
            if job.topology == "one_per_node":
                node_id = index.least_loaded((), exclude=used)
            else:
                node_id = index.least_loaded(used)
        else:
            if job.topology == "pack":
                roomy = [n for n in used if len(index.nodes[n].free_gpus) >= gpus]
                if roomy:
                    node_id = min(roomy, key=lambda n: len(index.nodes[n].free_gpus))
            if node_id is None:
                exclude = used if job.topology == "one_per_node" else ()
                want = (
                    gpus
                    if job.topology == "one_per_node"
                    else max(gpus, min(remaining, index.most_free(gpu_type)))
                )
                node_id = index.best_fit(gpu_type, want, exclude)
                if node_id is None and want > gpus:
                    node_id = index.best_fit(gpu_type, gpus, exclude)
        if node_id is None:
            undo()
            return None
        put(role, number, node_id, gpus)
        remaining -= gpus
    return sorted(taken, key=lambda p: (p.role, p.index))
