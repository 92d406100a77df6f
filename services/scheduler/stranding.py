"""What a placement strands: free GPU capacity left on a node that the jobs asking for GPUs
could use before the placement and cannot after it.

Best fit alone packs GPUs, blind to what else a node must still offer: a share that takes
the last whole GPU of a node whose other GPUs hold shares leaves rooms too small for the
commonest asks, and a job that takes most of a node's CPU leaves its other GPUs without the
cores any job would need beside them. Both leave GPUs idle while jobs wait, which is the
fragmentation that FGD (Weng et al., ATC '23) measures against the *workload mix*: the ask
shapes of the cluster's jobs, weighted by how many ask. A node's capacity is usable by a
shape when the node has the shape's CPU and memory free and one GPU with room for it.

This module keeps the measure cheap enough to run inside placement, where best fit walks
candidates in its own order:

- **The mix** (``WorkloadMix``) is the shapes of one-GPU instances (a share, or one whole
  GPU: the asks that fragments are made of), the commonest until they cover 95 % of such
  instances, as FGD cuts it, from the jobs pending and running: what the cluster is asked
  for. A shape carries the GPU type its job names (None: any), and counts only on nodes
  of that type, a share only on nodes that share.
- **What a placement strands** is the node's idle GPU capacity after it (thousandths)
  times the weight of the shapes that could use the node before and cannot after: what the
  placement takes from everyone else, and only that. (FGD also rewards using capacity that
  was fragmented already; measured on the Alibaba trace, that term lowers the allocation,
  so it is left out.)
- **Classes**: a placement that strands nothing beats any that strands some; among those
  that strand some, amounts within ``STRAND_TOLERANCE`` of each other count as equal, and
  best fit decides between them. So the walk in best-fit order stops at the first
  candidate that strands nothing: in the common case it costs what best fit costs.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from services.scheduler.model import NodeCapacity, PendingJob, RunningJob

SHARE_UNITS = 1000  # a GPU, in the thousandths shares are counted in
# Strandings this close (thousandths of a GPU of expected unusable capacity) tie, and best fit
# decides: without it, noise-level differences would override packing.
STRAND_TOLERANCE = 50
# A walk looks at no more candidates than this that strand some before it takes the least of
# them: the bound on a placement's cost where nearly every choice strands (a full cluster).
MAX_STRANDING_LOOKS = 64
POPULARITY = 0.95  # the shapes kept: the commonest, until they cover this share of the instances
NO_LIMIT = math.inf  # a node that reports no CPU or memory: nothing to run out of
_MAX_REMEMBERED = 100_000  # ``usable`` answers kept per mix (a cycle's worth; then forgotten)
# The most shapes a mix keeps, the commonest: what one weighing costs, whatever the queue.
MAX_SHAPES = 64

# A one-GPU instance's ask: the GPU type (None: any), CPUs, memory (MiB), thousandths of one
# GPU (1000: a whole one).
Shape = tuple[str | None, float, int, int]
# What a node offers one instance: its GPU type, whether it shares, CPUs, memory, most room
# on one GPU (thousandths).
Offer = tuple[str, bool, float, float, int]


class WorkloadMix:
    """Ask shapes and their weights (summing to 1), the commonest first.

    Worked out from its counts when first read: the planner builds one every cycle, and a
    cycle whose placements strand nothing (no node that counts CPU or memory, no shared
    GPU left as a node's largest room) never reads it. What it answers is remembered: a
    cluster's nodes offer the same few amounts over and over."""

    __slots__ = ("_counts", "_shapes", "_usable")

    def __init__(self, counts: Callable[[], Mapping[Shape, int]] | Mapping[Shape, int] | None = None) -> None:
        self._counts = counts
        self._shapes: tuple[tuple[str | None, float, int, int, float], ...] | None = None if counts else ()
        self._usable: dict[Offer, float] = {}

    @classmethod
    def of(cls, pending: Sequence[PendingJob], running: Sequence[RunningJob] = ()) -> WorkloadMix:
        """The mix of the one-GPU instances of the ``pending`` and ``running`` jobs, each
        of the GPU type its job asks for (None: any)."""
        return cls(lambda: _count(pending, running))

    @property
    def shapes(self) -> tuple[tuple[str | None, float, int, int, float], ...]:
        """(GPU type, CPUs, memory, thousandths, weight) per shape kept."""
        if self._shapes is None:
            counts = self._counts() if callable(self._counts) else self._counts or {}
            self._shapes = _commonest(counts)
        return self._shapes

    def __bool__(self) -> bool:
        return bool(self.shapes)

    def lost(self, before: Offer, cpus_after: float, memory_after: float, room_after: int) -> float:
        """The weight of the shapes that could use the node's offer ``before`` and not what
        is left of it: the shapes that fit what is left fit ``before`` too, so it is what
        fits the one less what fits the other."""
        gpu_type, sharing = before[0], before[1]
        lost = self.usable(before) - self.usable((gpu_type, sharing, cpus_after, memory_after, room_after))
        return max(0.0, round(lost, 9))  # float dust from adding the weights in two orders

    def usable(self, offer: Offer) -> float:
        """The weight of the shapes that could use ``offer``: of its node's type (or any),
        a share only where the node shares, within its CPUs, memory and room on one GPU."""
        weight = self._usable.get(offer)
        if weight is None:
            if len(self._usable) >= _MAX_REMEMBERED:
                self._usable.clear()
            gpu_type, sharing, cpus, memory, room = offer
            weight = self._usable[offer] = sum(
                [
                    share
                    for shape_type, shape_cpus, shape_memory, milli, share in self.shapes
                    if (shape_type is None or shape_type == gpu_type)
                    and (milli == SHARE_UNITS or sharing)
                    and milli <= room
                    and shape_cpus <= cpus + 1e-9
                    and shape_memory <= memory
                ]
            )
        return weight


def _count(pending: Sequence[PendingJob], running: Sequence[RunningJob]) -> Counter[Shape]:
    """Pending jobs that ask alike (``asks``) are looked at once: a queue holds many of each."""
    alike = Counter(job.asks for job in pending)
    first = {job.asks: job for job in reversed(pending)}
    counts: Counter[Shape] = Counter()
    for asks, count in alike.items():
        job = first[asks]
        for task in job.tasks:
            if task.gpu_milli or task.gpus == 1:
                shape = (job.gpu_type, task.cpus, task.memory_mb, task.gpu_milli or SHARE_UNITS)
                counts[shape] += count * task.instances
    for held in running:
        for n, (cpus, memory_mb) in enumerate(held.slice_asks):
            milli = held.shares[n] if held.shares else 0
            if milli or len(held.slices[n][1]) == 1:
                counts[(held.asked_type, cpus, memory_mb, milli or SHARE_UNITS)] += 1
    return counts


def _commonest(counts: Mapping[Shape, int]) -> tuple[tuple[str | None, float, int, int, float], ...]:
    """The commonest shapes until they cover ``POPULARITY`` of the instances (``MAX_SHAPES``
    at most), weighted; ties in count go to the larger shape, as FGD's simulator sorts them."""
    ranked = sorted(counts.items(), key=lambda item: (item[1], item[0][1:], item[0][0] or ""), reverse=True)
    total = sum(counts.values())
    kept: list[tuple[Shape, int]] = []
    covered = 0
    for shape, count in ranked[:MAX_SHAPES]:
        if covered >= POPULARITY * total:
            break
        kept.append((shape, count))
        covered += count
    return tuple(
        (gpu_type, cpus, memory, milli, count / covered) for (gpu_type, cpus, memory, milli), count in kept
    )


def strand_class(idle_after: int, lost: float) -> int:
    """0 when nothing is stranded, else how many ``STRAND_TOLERANCE`` steps (rounded up)."""
    if not lost or idle_after <= 0:
        return 0
    return math.ceil(round(idle_after * lost, 6) / STRAND_TOLERANCE)


def whole_strands(mix: WorkloadMix, node: NodeCapacity, want: int, cpus: float, memory_mb: int) -> int:
    """What taking ``want`` whole GPUs of the node (and ``cpus``, ``memory_mb``) strands, as
    a class (``strand_class``)."""
    if not counts_asks(node):
        return 0
    free_after = len(node.free_gpus) - want
    limited = _limited(node, cpus, memory_mb)
    if free_after > 0:
        if not limited:
            return 0  # a whole GPU stays free, and CPU and memory do not change: nothing does
        room_after = SHARE_UNITS
    elif not node.shares:
        return 0  # nothing idle is left on the node
    else:
        room_after = SHARE_UNITS - min(node.shares.values())
    if not mix:
        return 0
    idle_after = SHARE_UNITS * (free_after + len(node.shares)) - sum(node.shares.values())
    return _strands(mix, node, SHARE_UNITS, room_after, idle_after, cpus, memory_mb)


def share_strands(
    mix: WorkloadMix, node: NodeCapacity, gpu: int | None, milli: int, cpus: float, memory_mb: int
) -> int:
    """What a share of ``milli`` on the node's ``gpu`` strands: one that holds shares, or
    (None) one of its free GPUs."""
    if not counts_asks(node):
        return 0
    used = 0 if gpu is None else node.shares[gpu]
    free_after = len(node.free_gpus) - (gpu is None)
    limited = _limited(node, cpus, memory_mb)
    if free_after > 0 and not limited:
        return 0
    room = SHARE_UNITS - used
    others = [SHARE_UNITS - held for other, held in node.shares.items() if other != gpu]
    room_before = SHARE_UNITS if node.free_gpus else max([room, *others])
    room_after = SHARE_UNITS if free_after > 0 else max([room - milli, *others])
    if (room_after >= room_before and not limited) or not mix:
        return 0  # the node keeps as much room on one GPU, and its CPU and memory
    idle_after = SHARE_UNITS * free_after + sum(others) + room - milli
    return _strands(mix, node, room_before, room_after, idle_after, cpus, memory_mb)


def counts_asks(node: NodeCapacity) -> bool:
    """Whether stranding is weighed on the node: where it reports its CPUs or memory, so
    that asks of several dimensions must fit together. A node that reports neither is
    placed by best fit alone, as GPU-only clusters were."""
    return node.free_cpus is not None or node.free_memory_mb is not None


def _limited(node: NodeCapacity, cpus: float, memory_mb: int) -> bool:
    """Whether the ask takes CPU or memory that the node counts."""
    return bool((cpus and node.free_cpus is not None) or (memory_mb and node.free_memory_mb is not None))


def _strands(
    mix: WorkloadMix,
    node: NodeCapacity,
    room_before: int,
    room_after: int,
    idle_after: int,
    cpus: float,
    memory_mb: int,
) -> int:
    cpus_before = NO_LIMIT if node.free_cpus is None else node.free_cpus
    memory_before = NO_LIMIT if node.free_memory_mb is None else node.free_memory_mb
    offer = (node.gpu_type, node.sharing, cpus_before, memory_before, room_before)
    lost = mix.lost(offer, cpus_before - cpus, memory_before - memory_mb, room_after)
    return strand_class(idle_after, lost)
