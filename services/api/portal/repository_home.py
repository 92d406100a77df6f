"""The home page's aggregates (SQL only; ``routes_home.py`` decides what they mean).

Each panel of the page is one query, so a live refresh of a panel is one round trip
however large the cluster: GPUs per model, the cluster's utilisation series, jobs per
state, the open alerts, and the jobs whose GPUs idle (``sql/home.sql`` says how each
is counted). Nothing here knows who is asking beyond the username it is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from services.api.portal.repository import SQL
from shared.db.pool import Database

# The monitor's two history resolutions, as the API's /gpu-history offers them: buckets
# of 10 s kept a day, and their 5-minute roll-up kept a month.
FINE_S = 10
COARSE_S = 300


@dataclass(frozen=True, slots=True)
class GpuModelCount:
    model: str
    total: int
    used: int
    free: int


@dataclass(frozen=True, slots=True)
class UtilisationPoint:
    at_s: int
    utilisation_pct: float | None


@dataclass(frozen=True, slots=True)
class OpenAlert:
    id: str
    rule: str
    severity: str
    state: str
    summary: str
    started_at: datetime


@dataclass(frozen=True, slots=True)
class OpenAlerts:
    per_severity: dict[str, int]
    latest: list[OpenAlert]


@dataclass(frozen=True, slots=True)
class IdleJob:
    job_id: str
    name: str
    username: str
    virtual_cluster: str
    stopping: bool
    gpus: int
    held_since: datetime
    held_s: float
    gpu_hours_held: float
    held_mean_pct: float | None
    recent_pct: float | None
    recent_peak_pct: float | None

    @property
    def gpu_hours_used(self) -> float | None:
        """Held weighted by the mean utilisation over the held time; None without readings."""
        return None if self.held_mean_pct is None else self.gpu_hours_held * self.held_mean_pct / 100


class HomeRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def gpus_by_model(self) -> list[GpuModelCount]:
        return [GpuModelCount(**r) for r in await self._db.fetch(SQL.home_gpus_by_model)]

    async def utilisation_series(self, resolution_s: int, span_s: int) -> list[UtilisationPoint]:
        rows = await self._db.fetch(SQL.home_utilisation_series, resolution_s, span_s)
        return [UtilisationPoint(**r) for r in rows]

    async def job_states(self, username: str | None, ended_within_s: int) -> dict[str, int]:
        rows = await self._db.fetch(SQL.home_job_states, username, ended_within_s)
        return {r["state"]: r["jobs"] for r in rows}

    async def open_alerts(self, username: str | None, latest: int) -> OpenAlerts:
        rows = await self._db.fetch(SQL.home_open_alerts, username, latest)
        per_severity: dict[str, int] = dict(rows[0]["per_severity"] or {}) if rows else {}
        alerts = [
            OpenAlert(r["id"], r["rule"], r["severity"], r["state"], r["summary"], r["started_at"])
            for r in rows
            if r["id"] is not None
        ]
        return OpenAlerts(per_severity, alerts)

    async def idle_jobs(
        self, window_s: float, below_pct: float, username: str | None, limit: int
    ) -> list[IdleJob]:
        rows = await self._db.fetch(
            SQL.home_idle_jobs, window_s, below_pct, username, FINE_S, COARSE_S, limit
        )
        return [IdleJob(**r) for r in rows]
