"""Interactive sessions: ``POST /api/v1/jobs/{job}/sessions``'s answer, and the audit."""

from __future__ import annotations

from datetime import datetime

from corral.sdk.models.base import Model


class InteractiveSession(Model):
    """A session the API made: where its WebSocket is (``stream_url``, to open within
    seconds, once, with the same credential) and which task it reaches."""

    id: str
    kind: str
    job_id: str
    task: str
    node_id: str
    stream_url: str
    expires_at: datetime | None = None
