"""Where a gang goes: topology-aware placement over the free GPUs of ``node_index.py``.

Placement rules for one job on one GPU type (``place_gang``), all or nothing:

- **Whole job on one node** when it fits on one: the node with the fewest free GPUs that
  still holds it (best fit packs small jobs together and keeps whole nodes free).
- Otherwise instance by instance, biggest first: a node this job already uses when one has
  room (fewest nodes, the instances can talk over NVLink), else the best-fit node for
  what is *left* of the job, up to a whole node (a gang of 4x8 GPUs takes whole free nodes
  and leaves partly used ones to smaller jobs).
- ``single_node``: only the first rule. ``one_per_node``: every instance on a node of its
  own (best fit per instance).
- GPU-less instances go to a node of the job when it has one, else to the node with the
  least idle GPU capacity that has their CPU and memory (``NodeIndex.gpu_less_node``), so
  that they take CPU from nodes whose GPUs are in use rather than from beside idle GPUs.
- **Stranding**: each choice above, in its best-fit order, is the first candidate that
  leaves no capacity unusable to the workload mix, else the one that strands least
  (``stranding.py``).
- **GPU types**: a job that names none goes first to the types where its VC's quota
  holds it, the most headroom first (the planner); where it borrows, it is tried on the
  types in ``type_order``: where it fits best first (as the rules above would place it),
  not where most GPUs are free.
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
- **Shares** (a fraction of one GPU, in thousandths): only on nodes that share their GPUs
  (``NodeCapacity.sharing``), on one GPU, never across GPUs. In best-fit order, a share
  goes to a GPU that already holds shares (the least room that holds it), then to a fresh
  GPU of the sharing node with the fewest free GPUs, so whole GPUs stay together for
  whole-GPU jobs; the first of those that strands nothing (``share_slot`` says which). A
  GPU holding shares is not free: whole-GPU jobs never land on it, and it is free again
  when its last share leaves.

Nothing is changed unless the whole gang fits: a failed attempt gives back what it took.
"""

from __future__ import annotations

from collections.abc import Iterable

from services.scheduler.model import InstancePlacement, NodeCapacity, PendingJob
from services.scheduler.node_index import NodeIndex, has_room


def _use(node: NodeCapacity, cpus: float, memory_mb: int, sign: int) -> None:
    if node.free_cpus is not None:
        node.free_cpus -= sign * cpus
    if node.free_memory_mb is not None:
        node.free_memory_mb -= sign * memory_mb


class _Gang:
    """One placement attempt: what it took, so it can be given back if the gang fails."""

    def __init__(self, index: NodeIndex, job: PendingJob) -> None:
        self.index = index
        self.job = job
        self.used: dict[str, None] = {}  # nodes of this job, in the order they were chosen
        self.taken: list[InstancePlacement] = []

    def put(self, instance: Instance, node_id: str, shared_gpu: int = -1) -> None:
        """The instance on the node: its whole GPUs, or its share of ``shared_gpu``."""
        role, number, gpus, cpus, memory_mb, milli = instance
        if milli:
            self.index.take_share(node_id, shared_gpu, milli)
            node_gpus: tuple[int, ...] = (shared_gpu,)
        else:
            node_gpus = self.index.take(node_id, gpus) if gpus else ()
        _use(self.index.nodes[node_id], cpus, memory_mb, +1)
        self.used[node_id] = None
        self.taken.append(InstancePlacement(role, number, node_id, node_gpus, milli))

    def undo(self) -> None:
        unplace(self.index, self.job, self.taken)

    def placements(self) -> list[InstancePlacement]:
        return sorted(self.taken, key=lambda p: (p.role, p.index))


Instance = tuple[str, int, int, float, int, int]  # role, index, GPUs, CPUs, memory (MiB), share


def unplace(index: NodeIndex, job: PendingJob, placements: Iterable[InstancePlacement]) -> None:
    """Give back everything these placements of ``job`` took (a what-if undone)."""
    demands = {t.role: t for t in job.tasks}
    for placement in placements:
        if placement.gpu_milli:
            index.give_share(placement.node_id, placement.gpu_indices[0], placement.gpu_milli)
        elif placement.gpu_indices:
            index.give(placement.node_id, placement.gpu_indices)
        demand = demands[placement.role]
        _use(index.nodes[placement.node_id], demand.cpus, demand.memory_mb, -1)


def type_order(job: PendingJob, index: NodeIndex, types: list[str]) -> list[str]:
    """The types to try a job that names none on: where it fits best first, by what its
    first instance (a share), or all of it on one node, would strand and how tightly it
    would fit (``Fit``); then the types where it fits no one node, in the order given.
    Sending a job to the type with the most free GPUs instead spreads small jobs over the
    biggest pool and leaves holes in all of them."""
    if len(types) < 2 or not job.gpus:
        return types
    fits: dict[str, tuple[int, int]] = {}
    if job.shares:
        task = next(t for t in job.tasks if t.gpu_milli)
        for gpu_type in types:
            found = index.share_fit(gpu_type, task.gpu_milli, task.cpus, task.memory_mb)
            if found is not None:
                fits[gpu_type] = found[0][:2]
    elif job.topology != "one_per_node":
        need = int(job.gpus)
        cpus = sum(t.cpus * t.instances for t in job.tasks)
        memory_mb = sum(t.memory_mb * t.instances for t in job.tasks)
        for gpu_type in types:
            if need <= index.largest(gpu_type) and need <= index.free(gpu_type):
                fit = index.whole_fit(gpu_type, need, cpus=cpus, memory_mb=memory_mb)
                if fit is not None:
                    fits[gpu_type] = fit[:2]
    if not fits:
        return types
    ranked = sorted(fits, key=lambda t: (fits[t], types.index(t)))
    return ranked + [t for t in types if t not in fits]


def place_gang(job: PendingJob, index: NodeIndex, gpu_type: str) -> list[InstancePlacement] | None:
    """Place every instance of ``job`` on nodes of ``gpu_type``, or nothing (see the module
    docstring for the rules); the index is updated only on success."""
    if job.shares:
        shared: list[Instance] = sorted(
            (
                (t.role, i, t.gpus, t.cpus, t.memory_mb, t.gpu_milli)
                for t in job.tasks
                for i in range(t.instances)
            ),
            key=lambda item: (-item[2], -item[5]),
        )
        return _spread(job, index, gpu_type, shared, None)
    need = int(job.gpus)  # whole GPUs only, from here
    if need > index.free(gpu_type):
        return None  # the common case in a busy cluster: answered without looking at a node
    instances: list[Instance] = sorted(
        ((t.role, i, t.gpus, t.cpus, t.memory_mb, 0) for t in job.tasks for i in range(t.instances)),
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
    remaining = sum(instance[2] for instance in instances)
    for instance in instances:
        _, _, gpus, cpus, memory_mb, milli = instance
        node_id = None
        if milli:
            slot = _share_slot(index, gang, job, gpu_type, instance)
            if slot is None:
                gang.undo()
                return None
            gang.put(instance, *slot)
            continue
        if gpus == 0:
            if job.topology == "one_per_node":
                node_id = index.gpu_less_node((), gang.used, cpus, memory_mb)
            elif job.topology == "single_node" and gang.used:
                node = index.nodes[next(iter(gang.used))]  # its one node, or nowhere
                node_id = node.node_id if has_room(node, cpus, memory_mb) else None
            else:
                node_id = index.gpu_less_node(gang.used, (), cpus, memory_mb)
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


def _share_slot(
    index: NodeIndex, gang: _Gang, job: PendingJob, gpu_type: str, instance: Instance
) -> tuple[str, int] | None:
    """Where one instance's share goes, as the job's topology allows: ``pack`` prefers the
    job's own nodes, ``single_node`` keeps to the first, ``one_per_node`` avoids them."""
    _, _, _, cpus, memory_mb, milli = instance
    if job.topology == "one_per_node":
        return index.share_slot(gpu_type, milli, cpus, memory_mb, exclude=gang.used)
    if job.topology == "single_node" and gang.used:
        return index.share_slot(gpu_type, milli, cpus, memory_mb, only=(next(iter(gang.used)),))
    if gang.used:
        slot = index.share_slot(gpu_type, milli, cpus, memory_mb, only=gang.used)
        if slot is not None:
            return slot
    return index.share_slot(gpu_type, milli, cpus, memory_mb)
