"""Moves: room for a job that the free GPUs could hold, but no single node's.

A busy cluster fragments. Jobs end at different times, so the free GPUs end up scattered a
few per node, and a job that needs 8 GPUs on one node waits while 8 or more are free.
Least attained service does not help it: the small jobs in the way are often newer, less
served, than the waiting job, so they are not its victims. Gandiva and HiveD migrate
them; Corral moves them by preemption. It stops the few small jobs on the node closest
to having room, and the next cycle starts them again in the holes on the other nodes.
The waiting job gets its node; the moved jobs lose only a restart (the preemption's
grace period, requeued without it counting against them, their attained service kept).

On the trace slices a job of at most 8 GPUs waits with enough GPUs free, but not on one
node, for much of the time it waits at all: this is where duration-blind least attained
service falls furthest behind SRTF, which clears such a node by preempting whichever
small job has more left. Moves close most of that gap in average JCT and in the tail
wait, even when every restart is charged a minute (docs/performance.md, "Scheduling
policies", has the figures).

Rules (``choose_movers``):
- only for a job that fits on one node, and only when the free GPUs of its type could
  hold it;
- movers are borrowed jobs of at most the job's priority, so a guaranteed job never
  moves and no job moves one of higher priority. They are not promoted by the
  starvation guard, narrower than the job, on one node, and ran ``min_runtime_s``, so a
  job is not moved again as soon as it restarts;
- every mover must fit in the free GPUs of the other nodes, each into the fullest node
  that holds it, in whatever order the next cycle places them, or nothing moves. (A job
  ranked above a moved one may still take a hole first in the next cycle: the moved job
  then waits in its place, as after any preemption.)
- the node that needs the fewest GPUs moved wins, then the fewest jobs moved. The victim
  search (``victims.py``, rule ``move``) then checks by a what-if that the job fits there
  (CPUs, memory, topology) and holds that node's free GPUs for it, as for any victims.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from services.scheduler.model import PendingJob, PlanSettings, RunningJob
from services.scheduler.node_index import NodeIndex


def could_make_room(job: PendingJob, gpu_type: str, index: NodeIndex) -> bool:
    """Whether a move could help at all: the job fits on one node of the type, and the
    type's free GPUs could hold it."""
    # Shares never move others: they open a fresh GPU or wait for room on a shared one.
    return not job.shares and 0 < job.gpus <= index.largest(gpu_type) and index.free(gpu_type) >= job.gpus


def choose_movers(
    job: PendingJob,
    gpu_type: str,
    index: NodeIndex,
    on_node: dict[str, list[RunningJob]],
    claimed: set[str],
    settings: PlanSettings,
) -> list[RunningJob] | None:
    """The jobs to move so that ``job`` fits on one node of ``gpu_type``, fewest GPUs
    first; None when no move makes room. ``on_node``: the type's running jobs that hold
    GPUs on one node, by node."""
    if not could_make_room(job, gpu_type, index):
        return None
    holes = index.holes(gpu_type)  # most free first: the fewest GPUs to move first
    free_counts = [0] * (index.largest(gpu_type) + 1)
    for _, free in holes:
        free_counts[free] += 1
    best: tuple[float, int, list[RunningJob]] | None = None
    for node_id, free in holes:
        need = job.gpus - free
        if best is not None and need > best[0]:
            break  # further nodes have fewer GPUs free: they need more moved
        if index.nodes[node_id].total_gpus < job.gpus:
            continue
        movers = _movers(job, on_node.get(node_id, ()), need, claimed, settings.min_runtime_s)
        if movers is None:
            continue
        free_counts[free] -= 1  # the other nodes' holes
        fits = _fit_elsewhere((int(m.gpus) for m in movers), free_counts)  # whole GPUs: no shares move
        free_counts[free] += 1
        moved = sum(m.gpus for m in movers)
        if fits and (best is None or (moved, len(movers)) < best[:2]):
            best = (moved, len(movers), movers)
    return best[2] if best is not None else None


def _movers(
    job: PendingJob, running: Sequence[RunningJob], need: float, claimed: set[str], min_runtime_s: float
) -> list[RunningJob] | None:
    """Movable jobs on one node that free at least ``need`` GPUs: the smallest first, then
    the least served (ordering by run time since their start instead, the least progress
    lost, made no difference on cluster06 and cluster02)."""
    movable = sorted(
        (
            r
            for r in running
            if r.borrowed
            and r.priority <= job.priority
            and r.gpus < job.gpus
            and r.runtime_s >= min_runtime_s
            and not (r.promoted or r.preempting or r.job_id in claimed)
        ),
        key=lambda r: (r.gpus, r.attained_gpu_s, r.job_id),
    )
    chosen: list[RunningJob] = []
    freed = 0.0
    for r in movable:
        if freed >= need:
            break
        chosen.append(r)
        freed += r.gpus
    return chosen if freed >= need else None


def _fit_elsewhere(sizes: Iterable[int], free_counts: list[int]) -> bool:
    """Whether jobs of these sizes fit in nodes with these free counts (``free_counts[c]``
    nodes have ``c`` GPUs free), each into the fullest node that holds it, in whatever
    order they come: the next cycle places them in its queue's order, not by size, and a
    small one placed first may take the hole a bigger one needed."""
    seen: dict[tuple[tuple[int, ...], tuple[int, ...]], bool] = {}

    def every_order(counts: tuple[int, ...], left: tuple[int, ...]) -> bool:
        if not left:
            return True
        known = seen.get((counts, left))
        if known is None:
            known = seen[(counts, left)] = all(
                _fits_then(counts, left, size, every_order) for size in sorted(set(left))
            )
        return known

    return every_order(tuple(free_counts), tuple(sorted(sizes)))


def _fits_then(
    counts: tuple[int, ...],
    left: tuple[int, ...],
    size: int,
    rest: Callable[[tuple[int, ...], tuple[int, ...]], bool],
) -> bool:
    """Whether a job of ``size`` fits into the fullest node that holds it, and ``rest``
    holds for what is then free and the jobs left."""
    room = next((c for c in range(size, len(counts)) if counts[c]), None)
    if room is None:
        return False
    after = list(counts)
    after[room] -= 1
    after[room - size] += 1
    remaining = list(left)
    remaining.remove(size)
    return rest(tuple(after), tuple(remaining))
