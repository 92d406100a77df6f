"""CloudEvents-style envelope and the typed events Corral publishes.

``parse_event`` is the one way to turn bytes from the bus into a typed event; anything
it rejects is a poison message (see ``shared/bus/consumer.py``).
"""

from shared.events.envelope import Envelope
from shared.events.types import (
    AlertFiring,
    Event,
    JobCancelled,
    JobCancelRequested,
    JobFailed,
    JobPreempted,
    JobPreemptRequested,
    JobRetrying,
    JobRunning,
    JobScheduled,
    JobSubmitted,
    JobSucceeded,
    NodeDrained,
    NodeDrainRequested,
    NodeRegistered,
    NodeTelemetry,
    NodeUndrained,
    NodeUnreachable,
    TaskAssigned,
    TaskExited,
    TaskStarted,
    TaskStopRequested,
    event_json_schema,
    parse_event,
)

__all__ = [
    "AlertFiring",
    "Envelope",
    "Event",
    "JobCancelRequested",
    "JobCancelled",
    "JobFailed",
    "JobPreemptRequested",
    "JobPreempted",
    "JobRetrying",
    "JobRunning",
    "JobScheduled",
    "JobSubmitted",
    "JobSucceeded",
    "NodeDrainRequested",
    "NodeDrained",
    "NodeRegistered",
    "NodeTelemetry",
    "NodeUndrained",
    "NodeUnreachable",
    "TaskAssigned",
    "TaskExited",
    "TaskStarted",
    "TaskStopRequested",
    "event_json_schema",
    "parse_event",
]
