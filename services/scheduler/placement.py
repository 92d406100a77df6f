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
- **Racks**: a gang that needs more than one node goes to one rack (topology label) when
  one has room for all of it — the rack with the fewest free GPUs that still holds it —
  and across racks only when none does.
- **NVLink domains** inside a node: an instance's GPUs come from one domain when one has
  enough free (the domain with the fewest free that still holds them, so whole domains
  stay free for bigger tasks), else from as few domains as possible.

- **CPUs and memory**: an instance goes only to a node with its ``resources.cpus`` and
  ``memory_mb`` free as well (a node that reports none has no limit). What-ifs for
  preemption give back a victim's GPUs only, so the planner never preempts for CPU or
  memory: such a job waits until they come free.

Nothing is changed unless the whole gang fits: a failed attempt gives back what it took.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter

from services.scheduler.model import InstancePlacement, NodeCapacity, PendingJob


class NodeIndex:
    """Free GPUs of the ready nodes, bucketed by (type, free count)."""

    def __init__(self, nodes: Iterable[NodeCapacity]) -> None:
        self.nodes: dict[str, NodeCapacity] = {}
        self._buckets: dict[str, list[dict[str, None]]] = {}  # by type
        self._free: dict[str, int] = {}
        self._largest: dict[str, int] = {}
        # By (type, rack), for gangs kept in one rack: built for a type when first asked
        # (``_index_racks``), since most gangs fit on one node and most clusters of a type
        # are one rack; kept up to date from then on.
        self._racks: dict[str, list[str]] = {}
        self._rack_buckets: dict[tuple[str, str], list[dict[str, None]]] = {}
        self._rack_free: dict[tuple[str, str], int] = {}
        self._rack_indexed: set[str] = set()  # the types whose buckets by rack are built
        # Built for every cycle over every ready node (thousands): hence the locals.
        all_nodes, buckets_of, free_of, largest = self.nodes, self._buckets, self._free, self._largest
        for node in sorted(nodes, key=attrgetter("node_id")):
            node_id = node.node_id
            all_nodes[node_id] = node
            total = node.total_gpus
            if total <= 0:
                continue
            kind, free = node.gpu_type, len(node.free_gpus)
            buckets = buckets_of.get(kind)
            if buckets is None:
                buckets = buckets_of[kind] = []
                free_of[kind], largest[kind] = 0, 0
            while len(buckets) <= total or len(buckets) <= free:
                buckets.append({})
            buckets[free][node_id] = None
            free_of[kind] += free
            if total > largest[kind]:
                largest[kind] = total
        self._types = sorted(self._buckets, key=lambda kind: (-self._free[kind], kind))

    def types(self) -> list[str]:
        """GPU types of ready nodes, the most free GPUs (when the index was built) first."""
        return self._types

    def free(self, gpu_type: str | None = None, rack: str | None = None) -> int:
        if gpu_type is None:
            return sum(self._free.values())
        if rack is not None:
            self._index_racks(gpu_type)
            return self._rack_free.get((gpu_type, rack), 0)
        return self._free.get(gpu_type, 0)

    def racks(self, gpu_type: str) -> list[str]:
        """The racks with nodes of the type ("" for nodes without a label)."""
        racks = self._racks.get(gpu_type)
        if racks is None:
            of_type = {n.rack for n in self.nodes.values() if n.gpu_type == gpu_type and n.total_gpus > 0}
            racks = self._racks[gpu_type] = sorted(of_type)
        return racks

    def _index_racks(self, gpu_type: str) -> None:
        """The buckets by (type, rack) of a type, once: each rack's bucket is the type's
        bucket filtered to the rack's nodes, in the same order, so ties resolve as if they
        had been kept from the start (both change with the same moves, ``_rebucket``)."""
        if gpu_type in self._rack_indexed:
            return
        self._rack_indexed.add(gpu_type)
        racks = self.racks(gpu_type)
        for rack in racks:
            self._rack_buckets[(gpu_type, rack)], self._rack_free[(gpu_type, rack)] = [], 0
        for count, bucket in enumerate(self._buckets.get(gpu_type, [])):
            for rack in racks:
                self._rack_buckets[(gpu_type, rack)].append({})
            for node_id in bucket:
                rack = self.nodes[node_id].rack
                self._rack_buckets[(gpu_type, rack)][count][node_id] = None
                self._rack_free[(gpu_type, rack)] += count

    def largest(self, gpu_type: str | None = None) -> int:
        """GPUs of the biggest ready node (of the type), free or not."""
        if gpu_type is None:
            return max(self._largest.values(), default=0)
        return self._largest.get(gpu_type, 0)

    def _buckets_of(self, gpu_type: str, rack: str | None) -> list[dict[str, None]]:
        if rack is None:
            return self._buckets.get(gpu_type, [])
        self._index_racks(gpu_type)
        return self._rack_buckets.get((gpu_type, rack), [])

    def most_free(self, gpu_type: str, rack: str | None = None) -> int:
        """The most free GPUs on any one node of the type (in the rack)."""
        buckets = self._buckets_of(gpu_type, rack)
        for count in range(len(buckets) - 1, 0, -1):
            if buckets[count]:
                return count
        return 0

    def holes(self, gpu_type: str) -> list[tuple[str, int]]:
        """(node, free GPUs) of the type's nodes with some GPUs free, the most free first."""
        buckets = self._buckets_of(gpu_type, None)
        return [(node_id, count) for count in range(len(buckets) - 1, 0, -1) for node_id in buckets[count]]

    def best_fit(
        self,
        gpu_type: str,
        want: int,
        exclude: Iterable[str] = (),
        rack: str | None = None,
        cpus: float = 0.0,
        memory_mb: int = 0,
    ) -> str | None:
        """The node of the type (in the rack) with the fewest free GPUs that still has
        ``want``, and ``cpus`` and ``memory_mb`` free."""
        buckets = self._buckets_of(gpu_type, rack)
        excluded = set(exclude)
        for count in range(max(want, 1), len(buckets)):
            for node_id in buckets[count]:
                if node_id not in excluded and has_room(self.nodes[node_id], cpus, memory_mb):
                    return node_id
        return None

    def take(self, node_id: str, count: int) -> tuple[int, ...]:
        """``count`` free GPUs of the node, now taken: NVLink-close ones (``nvlink_choice``)."""
        node = self.nodes[node_id]
        if not node.domains:
            taken = tuple(node.free_gpus[:count])  # one domain: the lowest indices
            self._rebucket(node, node.free_gpus[count:])
            return taken
        chosen = nvlink_choice(node.free_gpus, node.domains, count)
        self._rebucket(node, [g for g in node.free_gpus if g not in chosen])
        return chosen

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
        kind, change = node.gpu_type, len(free) - len(node.free_gpus)
        in_rack = (kind, node.rack)
        by_rack = self._rack_buckets.get(in_rack)  # None: not indexed by rack (yet)
        for buckets in (self._buckets[kind], by_rack) if by_rack is not None else (self._buckets[kind],):
            del buckets[len(node.free_gpus)][node.node_id]
            while len(buckets) <= len(free):
                buckets.append({})
            buckets[len(free)][node.node_id] = None
        self._free[kind] += change
        if by_rack is not None:
            self._rack_free[in_rack] += change
        node.free_gpus = free

    def least_loaded(
        self, prefer: Iterable[str], exclude: Iterable[str] = (), cpus: float = 0.0, memory_mb: int = 0
    ) -> str | None:
        """A node for a GPU-less instance: one the job already uses, else the least loaded
        (either with ``cpus`` and ``memory_mb`` free)."""
        for node_id in prefer:
            if has_room(self.nodes[node_id], cpus, memory_mb):
                return node_id
        excluded = set(exclude)
        candidates = [
            n for n in self.nodes.values() if n.node_id not in excluded and has_room(n, cpus, memory_mb)
        ]
        best = min(candidates, key=lambda n: (n.load, n.node_id), default=None)
        return None if best is None else best.node_id


def has_room(node: NodeCapacity, cpus: float, memory_mb: int) -> bool:
    """Whether the node has ``cpus`` and ``memory_mb`` free (always, where it sets no limit)."""
    return (node.free_cpus is None or node.free_cpus >= cpus - 1e-9) and (
        node.free_memory_mb is None or node.free_memory_mb >= memory_mb
    )


def _use(node: NodeCapacity, cpus: float, memory_mb: int, sign: int) -> None:
    node.load += sign
    if node.free_cpus is not None:
        node.free_cpus -= sign * cpus
    if node.free_memory_mb is not None:
        node.free_memory_mb -= sign * memory_mb


def nvlink_choice(free: list[int], domains: dict[int, int], count: int) -> tuple[int, ...]:
    """``count`` of the ``free`` GPUs, NVLink-close: all from the domain with the fewest
    free GPUs that still has ``count`` (lowest indices), else from the fullest domains first."""
    by_domain: dict[int, list[int]] = {}
    for gpu in free:  # ascending, so each domain's list is too
        by_domain.setdefault(domains.get(gpu, 0), []).append(gpu)
    fitting = [d for d, gpus in by_domain.items() if len(gpus) >= count]
    if fitting:
        best = min(fitting, key=lambda d: (len(by_domain[d]), d))
        return tuple(by_domain[best][:count])
    chosen: list[int] = []
    for domain in sorted(by_domain, key=lambda d: (-len(by_domain[d]), d)):
        chosen.extend(by_domain[domain][: count - len(chosen)])
        if len(chosen) == count:
            break
    return tuple(sorted(chosen))


class _Gang:
    """One placement attempt: what it took, so it can be given back if the gang fails."""

    def __init__(self, index: NodeIndex, job: PendingJob) -> None:
        self.index = index
        self.job = job
        self.used: dict[str, None] = {}  # nodes of this job, in the order they were chosen
        self.taken: list[InstancePlacement] = []

    def put(self, instance: Instance, node_id: str) -> None:
        role, number, gpus, cpus, memory_mb = instance
        node_gpus = self.index.take(node_id, gpus) if gpus else ()
        _use(self.index.nodes[node_id], cpus, memory_mb, +1)
        self.used[node_id] = None
        self.taken.append(InstancePlacement(role, number, node_id, node_gpus))

    def undo(self) -> None:
        unplace(self.index, self.job, self.taken)

    def placements(self) -> list[InstancePlacement]:
        return sorted(self.taken, key=lambda p: (p.role, p.index))


Instance = tuple[str, int, int, float, int]  # role, index, GPUs, CPUs, memory (MiB)


def unplace(index: NodeIndex, job: PendingJob, placements: Iterable[InstancePlacement]) -> None:
    """Give back everything these placements of ``job`` took (a what-if undone)."""
    demands = {t.role: t for t in job.tasks}
    for placement in placements:
        if placement.gpu_indices:
            index.give(placement.node_id, placement.gpu_indices)
        demand = demands[placement.role]
        _use(index.nodes[placement.node_id], demand.cpus, demand.memory_mb, -1)


def place_gang(job: PendingJob, index: NodeIndex, gpu_type: str) -> list[InstancePlacement] | None:
    """Place every instance of ``job`` on nodes of ``gpu_type``, or nothing (see the module
    docstring for the rules); the index is updated only on success."""
    need = job.gpus
    if need > index.free(gpu_type):
        return None  # the common case in a busy cluster: answered without looking at a node
    instances: list[Instance] = sorted(
        ((t.role, i, t.gpus, t.cpus, t.memory_mb) for t in job.tasks for i in range(t.instances)),
        key=lambda item: -item[2],
    )
    if need and job.topology != "one_per_node" and need <= index.largest(gpu_type):
        cpus = sum(instance[3] for instance in instances)
        memory_mb = sum(instance[4] for instance in instances)
        node_id = index.best_fit(gpu_type, need, cpus=cpus, memory_mb=memory_mb)
        if node_id is not None:
            gang = _Gang(index, job)
            for instance in instances:
                gang.put(instance, node_id)
            return gang.placements()
        if job.topology == "single_node":
            return None
    elif job.topology == "single_node" and need:
        return None
    racks = index.racks(gpu_type)
    if len(racks) > 1 and need:
        # Several nodes, several racks: one rack if one can hold it all, best fit first.
        roomy = [rack for rack in racks if index.free(gpu_type, rack) >= need]
        for rack in sorted(roomy, key=lambda r: (index.free(gpu_type, r), r)):
            placed = _spread(job, index, gpu_type, instances, rack)
            if placed is not None:
                return placed
    return _spread(job, index, gpu_type, instances, None)


def _spread(
    job: PendingJob, index: NodeIndex, gpu_type: str, instances: list[Instance], rack: str | None
) -> list[InstancePlacement] | None:
    """Instance by instance over several nodes (of ``rack`` when given), or nothing."""
    gang = _Gang(index, job)
    remaining = job.gpus
    for instance in instances:
        _, _, gpus, cpus, memory_mb = instance
        node_id = None
        if gpus == 0:
            if job.topology == "one_per_node":
                node_id = index.least_loaded((), gang.used, cpus, memory_mb)
            elif job.topology == "single_node" and gang.used:
                node = index.nodes[next(iter(gang.used))]  # its one node, or nowhere
                node_id = node.node_id if has_room(node, cpus, memory_mb) else None
            else:
                node_id = index.least_loaded(gang.used, (), cpus, memory_mb)
        else:
            if job.topology == "pack":
                roomy = [
                    n
                    for n in gang.used
                    if len(index.nodes[n].free_gpus) >= gpus and has_room(index.nodes[n], cpus, memory_mb)
                ]
                if roomy:
                    node_id = min(roomy, key=lambda n: len(index.nodes[n].free_gpus))
            if node_id is None:
                exclude = gang.used if job.topology == "one_per_node" else ()
                want = (
                    gpus
                    if job.topology == "one_per_node"
                    else max(gpus, min(remaining, index.most_free(gpu_type, rack)))
                )
                node_id = index.best_fit(gpu_type, want, exclude, rack, cpus, memory_mb)
                if node_id is None and want > gpus:
                    node_id = index.best_fit(gpu_type, gpus, exclude, rack, cpus, memory_mb)
        if node_id is None:
            gang.undo()
            return None
        gang.put(instance, node_id)
        remaining -= gpus
    return gang.placements()
