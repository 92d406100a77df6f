"""Scheduling policies as plain code over an in-memory cluster snapshot, for the
trace-driven simulator (`bench/simulate.py`): they take the pending and running jobs and
a `Cluster` and return a `Round` of starts and preemptions, with no I/O and no clock of
their own.

Corral's own policy is not modelled here: `corral.py` replays a trace through the live
scheduler's `services/scheduler/planner.py` itself (quotas, borrowing, priority, fair
share, backfill, least attained service, the starvation guard, moves), so the simulator
measures the code that runs in production.

- cluster.py — nodes x GPUs and best-fit gang placement (fewest nodes, whole nodes for
  big gangs).
- jobs.py — what a policy may know about a job (never its true duration).
- base.py — the `Policy` protocol and the `Round` of decisions it returns.
- priority.py — the shared engine: priority order, gangs, optional preemption.
- fifo.py, oracle.py, las.py — the baselines: fifo, fifo_bf (EASY), sjf, sjf_skip,
  srtf, las.
- corral.py — Corral's duration-blind policy: the live scheduler's ``planner.plan``
  behind the same protocol.

`make_policy` builds one by name; the oracle baselines need the true durations, passed
explicitly, which is what keeps the others duration-blind.
"""

from __future__ import annotations

from bench.sim.policy.base import Policy, Round
from bench.sim.policy.cluster import Cluster, Placement, Slice
from bench.sim.policy.corral import CorralPolicy
from bench.sim.policy.fifo import Fifo, FifoBackfill
from bench.sim.policy.jobs import Job, JobId, Oracle
from bench.sim.policy.las import LeastAttainedService
from bench.sim.policy.oracle import (
    ShortestJobFirst,
    ShortestJobFirstSkip,
    ShortestRemainingTimeFirst,
)

POLICIES = ("fifo", "fifo_bf", "sjf", "sjf_skip", "srtf", "las", "corral")
NEEDS_ORACLE = frozenset({"fifo_bf", "sjf", "sjf_skip", "srtf"})


def make_policy(name: str, oracle: Oracle | None = None) -> Policy:
    """The policy called `name`; `oracle` (true durations) only reaches those that need it."""
    if name in NEEDS_ORACLE and oracle is None:
        raise ValueError(f"policy {name!r} needs the true job durations (an oracle)")
    match name:
        case "fifo":
            return Fifo()
        case "fifo_bf":
            assert oracle is not None
            return FifoBackfill(oracle)
        case "sjf":
            assert oracle is not None
            return ShortestJobFirst(oracle)
        case "sjf_skip":
            assert oracle is not None
            return ShortestJobFirstSkip(oracle)
        case "srtf":
            assert oracle is not None
            return ShortestRemainingTimeFirst(oracle)
        case "las":
            return LeastAttainedService()
        case "corral":
            return CorralPolicy()
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")


__all__ = [
    "NEEDS_ORACLE",
    "POLICIES",
    "Cluster",
    "CorralPolicy",
    "Job",
    "JobId",
    "Oracle",
    "Placement",
    "Policy",
    "Round",
    "Slice",
    "make_policy",
]
