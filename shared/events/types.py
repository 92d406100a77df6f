"""The discriminated union of every event type, and the one way to parse an event.

The types themselves live by entity: ``jobs.py`` (jobs and tasks), ``nodes.py``,
``alerts.py``; their ``data`` models derive from ``data.EventData``.

Subjects follow ``corral.<entity>.<verb>.<key>``: the key is the job id for job events
(so ``corral.job.*.<job>`` follows one job, in order) and the node id for task events
(so a node agent subscribes to ``corral.task.assigned.<its node>``). The envelope's
``subject`` is always the entity the event is about: the job, attempt, node or alert.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from shared.events.alerts import (
    AlertActionRequested,
    AlertChanged,
    AlertFiring,
    AlertRulesRequested,
    SilenceRequested,
)
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

Event = Annotated[
    JobSubmitted
    | JobScheduled
    | JobRunning
    | JobSucceeded
    | JobFailed
    | JobCancelled
    | JobCancelRequested
    | JobRetrying
    | JobPreemptRequested
    | JobPreempted
    | TaskAssigned
    | TaskStopRequested
    | TaskStarted
    | TaskExited
    | TaskOverLimit
    | NodeRegistered
    | NodeUnreachable
    | NodeDrained
    | NodeUndrained
    | NodeDrainRequested
    | NodeTelemetry
    | AlertFiring
    | AlertChanged
    | AlertActionRequested
    | SilenceRequested
    | AlertRulesRequested,
    Field(discriminator="type"),
]

_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(raw: bytes | str) -> Event:
    """Validate raw JSON into its typed event; raises ``pydantic.ValidationError``."""
    return _ADAPTER.validate_json(raw)


def event_json_schema() -> dict[str, Any]:
    """JSON Schema of every event type, for integrators (docs/events.md)."""
    return _ADAPTER.json_schema()
