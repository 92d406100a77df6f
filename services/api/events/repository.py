"""The events slice's SQL: what an event's facts need that the event does not carry."""

from __future__ import annotations

from pathlib import Path

from shared.db.pool import Database
from shared.db.queries import Queries

SQL = Queries(Path(__file__).parent / "sql")


class EventRepository:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def job_scope(self, job_id: str) -> tuple[str, str] | None:
        """The job's owner and VC (None: no such job, or not yet committed)."""
        row = await self.db.fetchrow(SQL.job_scope, job_id)
        return (str(row["username"]), str(row["virtual_cluster"])) if row else None

    async def alert_job(self, alert_id: str) -> str | None:
        """The job an alert is about (None: no such alert, or about no job)."""
        row = await self.db.fetchrow(SQL.alert_job, alert_id)
        return str(row["job"]) if row and row["job"] else None
