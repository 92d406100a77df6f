"""Time in one place: timezone-aware UTC, never naive datetimes."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
