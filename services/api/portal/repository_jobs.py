"""What the job list and a job's page read that no slice does (SQL only, ``sql/jobs.sql``).

The list's page is one statement: the newest-first keyset walk of ``api.jobs`` and, for
those rows alone, the wait and run times from ``launcher.attempts``; a page further back
also reads the keys of the page before it, for its "Newer" link. A job's GPU charts
are one aggregate over ``monitor.gpu_history``. Everything else a job's page shows comes
from the jobs slice's own repository, as the API reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from services.api.portal.repository import SQL
from shared.db.pool import Database


@dataclass(frozen=True, slots=True)
class JobListRow:
    id: str
    name: str
    username: str
    virtual_cluster: str
    state: str
    total_gpus: int
    created_at: datetime
    finished_at: datetime | None
    wait_s: float
    runtime_s: float | None


@dataclass(frozen=True, slots=True)
class GpuPoint:
    at_s: float
    utilization_avg: float | None
    utilization_max: float | None
    memory_used_gib: float | None


class JobPagesRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def jobs_page(
        self,
        states: list[str] | None,
        virtual_cluster: str | None,
        username: str | None,
        name_or_id_like: str | None,
        after: tuple[datetime, str] | None,
        limit: int,
    ) -> list[JobListRow]:
        """Newest first; every filter given must hold; ``after``: only jobs older than that
        (created_at, id)."""
        rows = await self._db.fetch(
            SQL.jobs_page,
            states,
            virtual_cluster,
            username,
            name_or_id_like,
            after[0] if after else None,
            after[1] if after else None,
            limit,
        )
        return [JobListRow(**row) for row in rows]

    async def newer_keys(
        self,
        states: list[str] | None,
        virtual_cluster: str | None,
        username: str | None,
        name_or_id_like: str | None,
        since: tuple[datetime, str],
        limit: int,
    ) -> list[tuple[datetime, str]]:
        """The (created_at, id) of the jobs at and after ``since``, oldest first."""
        rows = await self._db.fetch(
            SQL.jobs_newer_keys, states, virtual_cluster, username, name_or_id_like, since[0], since[1], limit
        )
        return [(row["created_at"], row["id"]) for row in rows]

    async def gpu_series(self, job_id: str, resolution_s: int, since: datetime) -> list[GpuPoint]:
        rows = await self._db.fetch(SQL.job_gpu_series, job_id, resolution_s, since)
        return [GpuPoint(**row) for row in rows]
