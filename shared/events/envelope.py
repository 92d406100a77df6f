"""The CloudEvents 1.0 envelope (structured JSON mode) shared by every event.

Every event travels in the same document on NATS, and later over SSE and webhooks:
``id`` (also the ``Nats-Msg-Id``, so JetStream drops duplicate publishes), ``source``
(the service), ``type`` (versioned: ``corral.job.submitted.v1``), ``time``, ``subject``
(the entity the event is about, e.g. the job id) and ``data``. ``traceparent`` is the
W3C trace context (CloudEvents' distributed-tracing extension), also sent as a NATS
header.

Event types change additively only; a breaking change is a new ``.v2`` type.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.clock import utcnow
from shared.ids import new_event_id


class Envelope(BaseModel):
    """Fields common to every event; subclasses pin ``type`` and ``data``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    specversion: Literal["1.0"] = "1.0"
    id: str = Field(default_factory=new_event_id, min_length=1, max_length=128)
    source: str = Field(min_length=1, max_length=256, description="corral/<service>")
    type: str
    time: datetime = Field(default_factory=utcnow)
    subject: str = Field(min_length=1, max_length=256, description="id of the entity")
    datacontenttype: Literal["application/json"] = "application/json"
    traceparent: str | None = None
    data: Any

    # ``corral.<entity>.<verb>``; the NATS subject appends the routing key.
    subject_prefix: ClassVar[str] = "corral.event"

    @property
    def routing_key(self) -> str:
        """The last subject token: the entity id unless a type routes otherwise."""
        return self.subject

    @property
    def nats_subject(self) -> str:
        """``corral.<entity>.<verb>.<key>`` — see ``shared/bus/streams.py``."""
        return f"{self.subject_prefix}.{self.routing_key}"
