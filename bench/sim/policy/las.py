"""Tiresias' discretized two-dimensional least-attained-service (2D-LAS), duration-blind.

Tiresias (Gu et al., NSDI 2019) ranks jobs by *attained service* in GPU-seconds (GPUs x
time run so far), because neither duration nor size alone predicts what is left. To avoid
constant reshuffling it discretizes: K priority queues with thresholds on attained
service; a job enters queue 0 and is demoted when its attained service crosses the next
threshold. Queues are served in order, jobs in one queue in the order they entered it
(first come, first served), and a job in a higher queue preempts running jobs of lower
queues — but never a running job of its own queue: the Tiresias simulator keeps running
jobs ahead of pending ones within a queue, which is what stops same-queue jobs from
preempting each other back and forth. A job that does not fit is skipped. The defaults
follow the paper's finding that two queues suffice: one threshold, 3,600 GPU-seconds
(the Tiresias simulator README's example; its code's default is 3 queues, 3,250/7,200).

Tiresias also describes an optional starvation knob (promote a job that waited longer
than a multiple of its last run); the baseline leaves it off, as its simulator does by
default. Corral's policy adds a starvation guard of its own (corral.py).

Demotion instants are computed exactly and reported through `next_change`, so the
simulator runs a round precisely when a job crosses a threshold — the limit of
Tiresias' periodic scheduling interval going to zero.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from bench.sim.policy.jobs import Job, JobId
from bench.sim.policy.priority import Key, PriorityPolicy

TIRESIAS_THRESHOLDS_GPU_S = (3600.0,)


class LasQueues:
    """Which discretized queue a job is in, and since when (first come, first served)."""

    def __init__(self, thresholds_gpu_s: Sequence[float]) -> None:
        self.thresholds = sorted(thresholds_gpu_s)
        self._entered: dict[JobId, tuple[int, float]] = {}

    def queue_of(self, job: Job, now: float) -> tuple[int, float]:
        """(queue index, time the job entered that queue)."""
        queue = bisect.bisect_right(self.thresholds, job.attained_at(now))
        if queue == 0:
            return 0, job.submit_s
        known = self._entered.get(job.id)
        if known is not None and known[0] == queue:
            return known
        # First seen in this queue: it crossed the threshold during its current run (we
        # are woken at that instant), or, if it is pending, when its last run ended.
        crossed = job.since_s
        if job.running:
            crossed += max(0.0, self.thresholds[queue - 1] - job.attained_gpu_s) / job.gpus
        self._entered[job.id] = (queue, crossed)
        return queue, crossed

    def next_demotion(self, job: Job, now: float) -> float | None:
        if not job.running:
            return None
        attained = job.attained_at(now)
        above = bisect.bisect_right(self.thresholds, attained)
        if above == len(self.thresholds):
            return None
        return now + (self.thresholds[above] - attained) / job.gpus

    def forget(self, job: Job) -> None:
        self._entered.pop(job.id, None)


class LeastAttainedService(PriorityPolicy):
    name = "las"
    preemptive = True

    def __init__(self, thresholds_gpu_s: Sequence[float] = TIRESIAS_THRESHOLDS_GPU_S) -> None:
        super().__init__()
        self.queues = LasQueues(thresholds_gpu_s)

    def pending_key(self, job: Job, now: float) -> Key:
        return self.queues.queue_of(job, now)

    def victim_bound(self, pending_key: Key, _now: float) -> Key:
        return (pending_key[0], math.inf)  # only jobs of lower queues are victims

    def next_change(self, job: Job, now: float) -> float | None:
        return self.queues.next_demotion(job, now)

    def finished(self, job: Job, now: float) -> None:
        super().finished(job, now)
        self.queues.forget(job)
