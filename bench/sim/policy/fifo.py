"""FIFO baselines: strict FIFO, and FIFO with EASY backfill.

`fifo` starts jobs in submission order and stops at the first gang that does not fit
(head-of-line blocking): the behaviour of a plain queue, and the floor every other
policy must beat.

`fifo_bf` is EASY backfilling (Lifka 1995; Mu'alem & Feitelson 2001) over gangs: the job
at the head of the queue gets a *reservation* at the earliest instant its gang will fit
(the shadow time), found by releasing the running jobs in order of their estimated end
on a copy of the per-node free counts — node-aware, so fragmentation counts. A later job
may start now only if it fits now and either ends by the shadow time or leaves the head's
gang still placeable at the shadow time. Only the head holds a reservation (that is what
makes it EASY rather than conservative backfilling), so the head can never be delayed by
a job behind it, given correct estimates.

Estimates: EASY needs a run-time estimate per job. The trace has none, so the baseline
uses the true duration (a perfect estimate, the usual choice in simulation studies and
the strongest version of this baseline); it is given as an explicit `Oracle`, like SJF's.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.sim.policy.base import Round
from bench.sim.policy.cluster import Cluster, Placement
from bench.sim.policy.jobs import Job, Oracle
from bench.sim.policy.priority import Key, PriorityPolicy


class Fifo(PriorityPolicy):
    name = "fifo"
    strict = True

    def pending_key(self, job: Job, _now: float) -> Key:
        return (job.submit_s,)


def fits_counts(free: Sequence[int], gpus: int, per_node: int) -> bool:
    """Whether a gang fits free GPU counts per node, with the placement rules of `Cluster`."""
    if gpus <= per_node:
        return any(f >= gpus for f in free)
    whole, rest = divmod(gpus, per_node)
    empty = sum(1 for f in free if f == per_node)
    if empty < whole:
        return False
    return rest == 0 or empty > whole or any(rest <= f < per_node for f in free)


class FifoBackfill(Fifo):
    name = "fifo_bf"

    def __init__(self, estimate: Oracle) -> None:
        super().__init__()
        self._estimate = estimate

    def running_key(self, job: Job, now: float) -> Key:
        # Running jobs sorted by estimated end: the order in which they free their GPUs.
        return (now + self._estimate(job) - job.executed_at(now),)

    def schedule(self, now: float, cluster: Cluster) -> Round:
        decided = super().schedule(now, cluster)  # strict FIFO up to the first misfit
        if len(self.pending) < 2 or cluster.free_total == 0:
            return decided
        queue = self.pending.ascending()
        _, head = next(queue)
        reservation: tuple[float, list[int]] | None = None  # computed only if someone could backfill
        for _, job in queue:
            if cluster.free_total == 0:
                break
            if job.gpus > cluster.free_total or not cluster.fits(job.gpus):
                continue
            if reservation is None:
                reservation = self._reservation(head, cluster)
            shadow_s, free_at_shadow = reservation
            placement = cluster.place(job.gpus)
            assert placement is not None
            if now + self._estimate(job) - job.executed_at(now) > shadow_s:
                # Still running at the shadow time: it may only use GPUs the head won't need.
                _add(free_at_shadow, placement, -1)
                if not fits_counts(free_at_shadow, head.gpus, cluster.gpus_per_node):
                    _add(free_at_shadow, placement, +1)
                    cluster.release(placement)
                    continue
            self.start(job, placement, now)
            decided.started.append(job)
        return decided

    def _reservation(self, head: Job, cluster: Cluster) -> tuple[float, list[int]]:
        """The head's shadow time, and the free GPUs per node expected at that instant."""
        free = [cluster.free_on(n) for n in range(cluster.nodes)]
        shadow_s = float("-inf")
        for (end_s,), job in self.running.ascending():
            # Jobs ending at the shadow instant itself are released too: they free GPUs then.
            if end_s > shadow_s and fits_counts(free, head.gpus, cluster.gpus_per_node):
                break
            shadow_s = end_s
            assert job.placement is not None
            _add(free, job.placement, +1)
        return shadow_s, free


def _add(free: list[int], placement: Placement, sign: int) -> None:
    for piece in placement.slices:
        free[piece.node] += sign * len(piece.gpus)
