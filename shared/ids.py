"""Typed identifiers and how new ones are made.

Job and attempt ids are ULID-like: 48 bits of milliseconds then 80 random bits, in
lower-case Crockford base32, behind a short prefix (``job-``, ``att-``). They sort by
creation time, which keeps indexes append-mostly and listings naturally ordered, and
they are safe in file names, URLs and NATS subjects (no dots, no wildcards).
"""

from __future__ import annotations

import os
import time
import uuid
from typing import NewType

JobId = NewType("JobId", str)
AttemptId = NewType("AttemptId", str)
NodeId = NewType("NodeId", str)
EventId = NewType("EventId", str)
AlertId = NewType("AlertId", str)
SilenceId = NewType("SilenceId", str)
WebhookId = NewType("WebhookId", str)
ArtifactId = NewType("ArtifactId", str)

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def _ulid() -> str:
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_job_id() -> JobId:
    return JobId(f"job-{_ulid()}")


def new_attempt_id() -> AttemptId:
    return AttemptId(f"att-{_ulid()}")


def new_alert_id() -> AlertId:
    return AlertId(f"alr-{_ulid()}")


def new_silence_id() -> SilenceId:
    return SilenceId(f"sil-{_ulid()}")


def new_event_id() -> EventId:
    return EventId(str(uuid.uuid4()))


def new_webhook_id() -> WebhookId:
    return WebhookId(f"whk-{_ulid()}")


def new_artifact_id() -> ArtifactId:
    return ArtifactId(f"art-{_ulid()}")
