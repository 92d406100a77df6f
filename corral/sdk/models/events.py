"""One server-sent event of ``GET /api/v1/events``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Event:
    """``id`` is the stream's cursor (opaque; resume from it), ``type`` the event type,
    ``document`` the CloudEvents document exactly as Corral publishes it on NATS."""

    id: str
    type: str
    document: dict[str, Any]

    @property
    def data(self) -> dict[str, Any]:
        data = self.document.get("data")
        return data if isinstance(data, dict) else {}

    @property
    def subject(self) -> str | None:
        subject = self.document.get("subject")
        return subject if isinstance(subject, str) else None
