"""Oracle baselines that know every job's true duration: SJF and SRTF.

No real scheduler knows run times, so these are yardsticks, not candidates: they bound
what a duration-blind policy can hope for on average JCT. Each is handed an explicit
`Oracle`; the duration-blind policies are never given one.

- `sjf`: non-preemptive shortest-job-first in strict order: the shortest pending job
  starts first and, like strict FIFO, a gang that does not fit blocks those behind it.
- `sjf_skip`: the same order, but a gang that does not fit is skipped, so narrower jobs
  behind it use the free GPUs (greedy list scheduling, no reservation).
- `srtf`: preemptive shortest-remaining-time-first. A pending job preempts running jobs
  with more time left (victims chosen as in priority.py) when it cannot fit otherwise;
  one that cannot fit even so is skipped. Running jobs are ranked by their end time,
  which stays fixed while they run, and compared with a pending job's remaining time
  through `victim_bound`: so no re-ranking or wake-ups are needed.
"""

from __future__ import annotations

from bench.sim.policy.jobs import Job, Oracle
from bench.sim.policy.priority import Key, PriorityPolicy


class ShortestJobFirst(PriorityPolicy):
    name = "sjf"
    strict = True

    def __init__(self, duration: Oracle) -> None:
        super().__init__()
        self._duration = duration

    def pending_key(self, job: Job, _now: float) -> Key:
        return (self._duration(job),)


class ShortestJobFirstSkip(ShortestJobFirst):
    name = "sjf_skip"
    strict = False


class ShortestRemainingTimeFirst(PriorityPolicy):
    name = "srtf"
    preemptive = True

    def __init__(self, duration: Oracle) -> None:
        super().__init__()
        self._duration = duration

    def pending_key(self, job: Job, now: float) -> Key:
        return (self._duration(job) - job.executed_at(now),)

    def running_key(self, job: Job, now: float) -> Key:
        return (now + self._duration(job) - job.executed_at(now),)  # its end time

    def victim_bound(self, pending_key: Key, now: float) -> Key:
        # A running job ending after now + (the pending job's remaining time) has more left.
        return (now + pending_key[0],)
