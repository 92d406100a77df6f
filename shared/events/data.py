"""The base of every event's ``data``, and the bounds its fields share."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# Bounds the database columns can hold, and text without control characters (a NUL or a
# newline in a heartbeat must be refused at the door, not fail a batch of writes).
INT32 = 2**31 - 1
INT63 = 2**63 - 1
TEXT = r"^[^\x00-\x1f\x7f]*$"


class EventData(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
