"""What a policy knows about a job: its request and its history — never its true duration.

The true run time of a job is not on `Job` at all. The simulator keeps it to itself and
hands it only to the oracle baselines (SJF, SRTF) as an explicit `Oracle`; so a policy
that is not given one is duration-blind by construction, not by good intentions.

Run history (`executed_s`, `attained_gpu_s`, `waited_s`) covers finished runs; the
`*_at(now)` methods add the current run or the current wait, so a policy can evaluate a
job at any instant without the owner having to tick it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NewType

from bench.sim.policy.cluster import Placement

JobId = NewType("JobId", str)


@dataclass(eq=False)
class Job:
    id: JobId
    seq: int  # arrival order; the tie-breaker everywhere, so runs are deterministic
    submit_s: float
    gpus: int
    vc: str
    running: bool = False
    placement: Placement | None = None
    # When the current run (if running) or the current wait (if pending) began.
    since_s: float = 0.0
    executed_s: float = 0.0  # wall time of finished runs
    attained_gpu_s: float = 0.0  # GPU-seconds of finished runs (Tiresias' attained service)
    waited_s: float = 0.0  # time spent pending before the current wait
    first_start_s: float | None = None
    preemptions: int = 0

    def __post_init__(self) -> None:
        self.since_s = self.submit_s

    def executed_at(self, now: float) -> float:
        return self.executed_s + (now - self.since_s if self.running else 0.0)

    def attained_at(self, now: float) -> float:
        return self.attained_gpu_s + (self.gpus * (now - self.since_s) if self.running else 0.0)

    def waited_at(self, now: float) -> float:
        return self.waited_s + (0.0 if self.running else now - self.since_s)

    def start(self, now: float, placement: Placement) -> None:
        assert not self.running
        self.waited_s += now - self.since_s
        self.running, self.placement, self.since_s = True, placement, now
        if self.first_start_s is None:
            self.first_start_s = now

    def stop(self, now: float) -> Placement:
        """End the current run (finished or preempted); returns the GPUs to release."""
        assert self.running
        assert self.placement is not None
        ran = now - self.since_s
        self.executed_s += ran
        self.attained_gpu_s += ran * self.gpus
        placement = self.placement
        self.running, self.placement, self.since_s = False, None, now
        return placement


# The oracle baselines' privilege: a job's true total run time.
Oracle = Callable[[Job], float]
