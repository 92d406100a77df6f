"""The portal's own rows: sign-in sessions (SQL only; ``session.py`` decides).

The pages read what the slices' repositories read; the queries no slice needs (a page's
aggregates) are in ``repository_<page>.py`` beside this one, sharing ``SQL``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from shared.db.pool import Database
from shared.db.queries import Queries

SQL = Queries(Path(__file__).parent / "sql")


@dataclass(frozen=True, slots=True)
class SessionRow:
    token_sha256: str
    username: str
    expires_at: datetime


class SessionRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def insert(self, secret_sha256: str, token_sha256: str, username: str, lifetime_s: float) -> None:
        await self._db.execute(SQL.insert_session, secret_sha256, token_sha256, username, lifetime_s)

    async def by_secret(self, secret_sha256: str) -> SessionRow | None:
        row = await self._db.fetchrow(SQL.session_by_secret, secret_sha256)
        return SessionRow(**dict(row)) if row is not None else None

    async def delete(self, secret_sha256: str) -> None:
        await self._db.execute(SQL.delete_session, secret_sha256)

    async def forget_expired(self) -> None:
        await self._db.execute(SQL.forget_expired_sessions)
