"""The interface every policy implements, and the one decision record they return.

A policy owns its queue. It is told when a job is submitted and when a running job
finishes; in a *round* at time `now` it decides which pending jobs start and which
running jobs are preempted, applies those decisions to the cluster snapshot and to the
jobs itself (placing and releasing GPUs, starting and stopping), and returns them so its
caller can act: the simulator schedules completions, the live service commits placements.

Why a stateful queue rather than a fresh list each round: a round must not cost
O(all jobs) — the Philly replay runs ~10⁵ rounds over ~10³ queued jobs — so policies
keep their jobs sorted by priority and re-sort one job only when its priority changes.
Priorities change at submission, start, preemption, and at instants a policy can predict
(attained service crossing a queue threshold, a wait reaching a starvation limit):
`wake_at` names that instant, and the caller calls `wake_at` again when it comes, which
lets the policy re-rank the job. This keeps the simulator event-driven — no ticking.

Policies never sleep, read clocks or do I/O; `now` is always passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from bench.sim.policy.cluster import Cluster
from bench.sim.policy.jobs import Job


@dataclass
class Round:
    """What one round decided. Preempted jobs are back in the queue with their history."""

    started: list[Job] = field(default_factory=list)
    preempted: list[Job] = field(default_factory=list)


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def preemptive(self) -> bool:
        """False promises that rounds never preempt (so a round with no free GPU is moot)."""
        ...

    def submit(self, job: Job, now: float) -> None:
        """A new job joins the queue."""
        ...

    def schedule(self, now: float, cluster: Cluster) -> Round:
        """Decide this round; `cluster` and the jobs are updated to match the result."""
        ...

    def wake_at(self, job: Job, now: float) -> float | None:
        """Re-rank `job` as of `now`; return when (after `now`) its rank next changes, if ever.

        Called after the job is submitted, started or preempted, and again at each instant
        it returned.
        """
        ...

    def finished(self, job: Job, now: float) -> None:
        """A running job ended (its GPUs are already released): forget it."""
        ...
