"""The JetStream streams Corral uses, declared once.

Lifecycle streams keep every event for a week with file storage: they are the
integrators' replayable feed. Metrics go to their own stream with short limits, so a
flood of telemetry can never crowd lifecycle events out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StreamSpec:
    name: str
    subjects: tuple[str, ...]
    max_age_s: float
    max_bytes: int = -1
    # Lifecycle events are the record of what happened: never dropped for space early.
    discard_new: bool = False
    # Memory storage for what may be lost (metrics): no disk writes for a flood of
    # heartbeats, and the stream may be recreated when its settings cannot be updated.
    in_memory: bool = False


DAY = 24 * 3600.0

JOBS = StreamSpec("CORRAL_JOBS", ("corral.job.>", "corral.task.>"), max_age_s=7 * DAY)
NODES = StreamSpec("CORRAL_NODES", ("corral.node.>",), max_age_s=7 * DAY)
ALERTS = StreamSpec("CORRAL_ALERTS", ("corral.alert.>",), max_age_s=30 * DAY)
METRICS = StreamSpec(
    "CORRAL_METRICS", ("corral.metrics.>",), max_age_s=300.0, max_bytes=256 * 1024 * 1024, in_memory=True
)

STREAMS: tuple[StreamSpec, ...] = (JOBS, NODES, ALERTS, METRICS)
