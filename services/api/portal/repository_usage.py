"""The usage page's one query: GPU-hours held and used per UTC day, user and VC (SQL only;
``routes_usage.py`` adds them up by user, VC and day and writes the CSV).

Held comes from the scheduler's allocations (GPUs x the time between placement and
release, clipped to each day of the window), so it is what a job kept from others
whether or not it used it. Used weights each job's held time in a day by its GPUs' mean
utilisation that day, a mean of the job's own readings (not the node's) that the
monitor folds per job and day from its 5-minute history (``monitor.job_gpu_usage_daily``,
kept ``CORRAL_MONITOR_JOB_USAGE_KEEP_S``). Held time without any reading is reported as
such.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from services.api.portal.repository import SQL
from shared.db.pool import Database


@dataclass(frozen=True, slots=True)
class UsageRow:
    day: date
    username: str
    virtual_cluster: str
    gpu_hours_held: float
    gpu_hours_used: float
    gpu_hours_unmeasured: float


class UsageRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def usage(self, since: datetime, until: datetime, username: str | None) -> list[UsageRow]:
        """Per (day, user, VC) in [since, until), oldest day first; ``username``: one user's."""
        rows = await self._db.fetch(SQL.usage_by_day_user_vc, since, until, username)
        return [UsageRow(**r) for r in rows]
