"""Corral's starvation guard: which long-waiting jobs are promoted, and when.

Least attained service starves long jobs under sustained load: every wave of arrivals
outranks them. The guard promotes a few of them so that they run, without turning the
policy into FIFO. Its rules, each one there because the simpler form failed on the bench
slices (docs/performance.md, "Scheduling policies"):

- **Load-aware limit.** A job becomes a candidate once its total wait (before its first
  start and after every preemption) reaches `limit_s`: the larger of `min_wait_s` and
  `factor` times the *typical wait*, a time-weighted moving average (time constant
  `time_constant_s`) of the queueing delay of jobs as they finish. A fixed limit cannot
  fit every load: 12 h cut the tail on the lightly loaded slices but promoted hundreds of
  jobs on the overloaded ones, where everyone waits that long.
- **Longest wait first.** Candidates are promoted strictly in order of total wait.
- **A GPU budget.** Promoted jobs, pending or running, hold at most `share` of the
  cluster's GPUs; the next candidate waits for budget (and blocks those behind it, as an
  EASY reservation blocks backfill), so arrivals always keep the rest of the cluster.
- **Narrow jobs only.** A job wider than `max_width` of the cluster is never promoted:
  running one out of turn blocks a quarter or more of the cluster for its whole (unknown)
  duration, which cost more average JCT than all the other promotions together.

A promoted job stays promoted until it finishes; the policy ranks it above every other
job, lets it preempt any job that is not promoted, and never preempts it.

The typical wait is the live policy's own (``services/scheduler/starvation.py``,
``TypicalWait``): each completion moves it by weight `max(1 - exp(-dt /
time_constant_s), MIN_WEIGHT)`, where dt is the time since the previous completion: a
time average, in which a burst of completions at one instant still counts a little.
"""

from __future__ import annotations

import heapq

from services.scheduler.policy.jobs import Job
from services.scheduler.starvation import TypicalWait


class StarvationGuard:
    def __init__(
        self,
        min_wait_s: float,
        factor: float,
        time_constant_s: float,
        share: float,
        max_width: float,
    ) -> None:
        if not 0 < max_width <= share <= 1:
            raise ValueError(
                f"need 0 < max_width <= share <= 1 so that a promotable job always fits an empty"
                f" budget; got max_width={max_width}, share={share}"
            )
        self.min_wait_s = min_wait_s
        self.factor = factor
        self.time_constant_s = time_constant_s
        self.share = share
        self.max_width = max_width
        self.typical_wait = TypicalWait(time_constant_s)
        # Candidates, longest total wait first: -(waited_s - since_s) is fixed while pending.
        self._candidates: list[tuple[float, int, Job]] = []
        self._queued: dict[int, float] = {}  # seq -> order of its live entry
        self._promoted: dict[int, Job] = {}
        self._promoted_gpus = 0

    def limit_s(self) -> float:
        return max(self.min_wait_s, self.factor * self.typical_wait.value)

    def promoted(self, job: Job) -> bool:
        return job.seq in self._promoted

    def candidate_at(self, job: Job, now: float) -> float | None:
        """For a pending job: queue it as a candidate once it qualifies, else say when it will."""
        order = job.since_s - job.waited_s
        if job.running or job.seq in self._promoted or self._queued.get(job.seq) == order:
            return None
        qualifies_at = now + self.min_wait_s - job.waited_at(now)
        if qualifies_at > now:  # (rounding can leave it a hair short when woken for this)
            return qualifies_at
        heapq.heappush(self._candidates, (order, job.seq, job))
        self._queued[job.seq] = order
        return None

    def promote(self, now: float, total_gpus: int) -> list[Job]:
        """The candidates promoted now; the caller re-ranks them."""
        budget = self.share * total_gpus
        limit = self.limit_s()
        chosen: list[Job] = []
        while self._candidates:
            order, seq, job = self._candidates[0]
            live = not job.running and order == job.since_s - job.waited_s
            if not live or job.gpus > self.max_width * total_gpus:
                heapq.heappop(self._candidates)  # it started unpromoted since, or is too wide
                if self._queued.get(seq) == order:
                    del self._queued[seq]
                continue
            if job.waited_at(now) < limit or self._promoted_gpus + job.gpus > budget:
                break
            heapq.heappop(self._candidates)
            del self._queued[seq]
            self._promoted[seq] = job
            self._promoted_gpus += job.gpus
            chosen.append(job)
        return chosen

    def finished(self, job: Job, now: float) -> None:
        self.typical_wait.finished(now, job.waited_s)
        self._queued.pop(job.seq, None)
        if self._promoted.pop(job.seq, None) is not None:
            self._promoted_gpus -= job.gpus
