"""The scheduler's Prometheus metrics (served on its health port with the shared ones).

Queue lengths and GPUs in use are set from each cycle's snapshot, so they describe the
cluster as the active scheduler last saw it; a standby reports ``corral_scheduler_leader 0``
and leaves its per-VC gauges empty, so summing over instances never double-counts.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

from services.scheduler.model import PendingJob, Plan, RunningJob

CYCLE_DURATION = Histogram(
    "corral_scheduler_cycle_duration_seconds",
    "Time of one scheduling cycle: snapshot, policy and the transaction of its decisions.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0),
)
PLACEMENTS = Counter("corral_scheduler_placements", "Jobs placed (one per job generation).")
PREEMPTIONS = Counter("corral_scheduler_preemptions", "Preemptions the scheduler asked for.")
LEADER = Gauge("corral_scheduler_leader", "1 while this instance is the active scheduler.")
QUEUE_LENGTH = Gauge(
    "corral_scheduler_queue_length",
    "Jobs left pending after the last cycle, by virtual cluster and why they wait.",
    ["virtual_cluster", "reason"],
)
GPUS_IN_USE = Gauge(
    "corral_scheduler_gpus_in_use",
    "GPUs held by placed jobs, by virtual cluster and whether they are borrowed.",
    ["virtual_cluster", "borrowed"],
)


def record_cycle(pending: Iterable[PendingJob], result: Plan, running: Iterable[RunningJob]) -> None:
    """Queues and GPUs in use once the cycle's decisions are taken (``running`` is the
    snapshot's, from before them)."""
    vc_of = {job.job_id: job.vc for job in pending}
    queues = Tally((vc_of.get(w.job_id, "?"), w.reason) for w in result.waiting)
    held: dict[tuple[str, str], float] = {}
    for job in running:
        key = (job.vc, _flag(job.borrowed))
        held[key] = held.get(key, 0.0) + job.gpus
    for decision in result.decisions:
        key = (decision.job.vc, _flag(decision.borrowed))
        held[key] = held.get(key, 0.0) + decision.job.gpus
    # Cleared and refilled with no await between: a scrape never sees half of it, and a VC
    # whose queue emptied drops out instead of showing its last length forever.
    QUEUE_LENGTH.clear()
    for (vc, reason), count in queues.items():
        QUEUE_LENGTH.labels(vc, reason).set(count)
    GPUS_IN_USE.clear()
    for (vc, borrowed), gpus in held.items():
        GPUS_IN_USE.labels(vc, borrowed).set(gpus)


def _flag(borrowed: bool) -> str:
    return "true" if borrowed else "false"


def record_standing_down() -> None:
    LEADER.set(0)
    QUEUE_LENGTH.clear()
    GPUS_IN_USE.clear()
