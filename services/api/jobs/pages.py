"""The job list's pages and the tags' shape: the list's cursor, what a tag may be.

The list is keyed on ``(created_at, id)``, newest first, the order of its index: a
cursor is the key of the last job of a page, so the next page starts right after it
whatever was submitted meanwhile. It is opaque to clients (URL-safe base64 of the key)
and checked strictly: a forged one is a 422, never a 500.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime

from services.api.jobs.repository import JobRow
from shared.errors import InvalidInput

MAX_TAGS = 32
# Letters, digits and a few separators people use in labels (team:vision, lr=0.1, v1.2).
TAG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:=/+-]{0,62}$"
_JOB_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


@dataclass(frozen=True)
class JobCursor:
    created_at: datetime
    job_id: str

    @classmethod
    def of(cls, row: JobRow) -> JobCursor:
        return cls(row.created_at, row.id)

    def encode(self) -> str:
        raw = f"{self.created_at.isoformat()} {self.job_id}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def parse(cls, text: str) -> JobCursor:
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
            stamp, job_id = raw.split(" ")
            created_at = datetime.fromisoformat(stamp)
        except (binascii.Error, UnicodeDecodeError, ValueError):
            created_at, job_id = None, ""
        if created_at is None or created_at.tzinfo is None or not set(job_id) <= _JOB_ID_CHARS:
            raise InvalidInput(
                "cursor is not one this API handed out; give the next_cursor of the previous page,"
                " or none for the first page"
            )
        return cls(created_at, job_id)
