"""CloudEvents-style envelope and the typed events Corral publishes.

``parse_event`` is the one way to turn bytes from the bus into a typed event; anything
it rejects is a poison message (see ``shared/bus/consumer.py``).
"""

from shared.events.alerts import (
    AlertActionRequested,
    AlertChanged,
    AlertFiring,
    AlertRulesRequested,
    SilenceRequested,
)
from shared.events.envelope import Envelope
from shared.events.jobs import (
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
    TaskAssigned,
    TaskExited,
    TaskOverLimit,
    TaskStarted,
    TaskStopRequested,
)
from shared.events.nodes import (
    NodeDrained,
    NodeDrainRequested,
    NodeRegistered,
    NodeTelemetry,
    NodeUndrained,
    NodeUnreachable,
)
from shared.events.subjects import subject_for, subjects_of
from shared.events.types import Event, event_json_schema, parse_event

__all__ = [
    "AlertActionRequested",
    "AlertChanged",
    "AlertFiring",
    "AlertRulesRequested",
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
    "SilenceRequested",
    "TaskAssigned",
    "TaskExited",
    "TaskOverLimit",
    "TaskStarted",
    "TaskStopRequested",
    "event_json_schema",
    "parse_event",
    "subject_for",
    "subjects_of",
]
