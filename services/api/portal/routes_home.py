"""``/``: the cluster at a glance, and the jobs that hold GPUs without using them.

The page is five panels, each rendered by one route (``/home/<panel>``) that the page
includes on first load and that the panel fetches again when ``/live/cluster`` says
something changed (a job, node or alert event, or the telemetry refresh): so the first
paint and every update are the same code. Each panel is one query (``repository_home``),
none of which grows with the number of jobs ever run.

What a user sees is what the API shows them: GPUs and utilisation are the cluster's
(every user may list nodes and GPUs); virtual clusters are those they may use
(``cluster/repository.list_vcs``, as ``GET /api/v1/virtual-clusters``); job counts,
alerts and idle jobs are their own (admins: everyone's), as ``GET /api/v1/jobs`` and
``GET /api/v1/alerts`` scope them.

Idle GPUs. OpenPAI's home page flagged jobs "running over 5 days under 10 % GPU", which
misses a job that idles for a day and names no cost. Here a job is idle when every GPU
it holds has peaked under ``CORRAL_API_PORTAL_IDLE_GPU_PCT`` for the last
``CORRAL_API_PORTAL_IDLE_GPU_MINUTES`` (history covering most of that window, so no
readings is no verdict), and the panel says what it costs: GPU-hours held, and GPU-hours
used (held x mean utilisation over the held time). Its Stop button cancels the job
through ``jobs/cancellation.py``, exactly as ``POST /api/v1/jobs/{id}/cancel``.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.api.cluster.dependencies import ClusterRepo
from services.api.cluster.repository import VcRow
from services.api.dependencies import Db, SettingsDep
from services.api.jobs.cancellation import cancel_job
from services.api.jobs.dependencies import JobsRepo
from services.api.portal.dependencies import SignedIn, SignedInForm
from services.api.portal.errors import PortalRoute
from services.api.portal.live import JOB_ID
from services.api.portal.rendering import render
from services.api.portal.repository_home import COARSE_S, GpuModelCount, HomeRepository, UtilisationPoint
from services.api.portal.session import PortalUser
from services.api.settings import ApiSettings
from shared.db.pool import Database
from shared.gpu_types import gpu_type_of

router = APIRouter(route_class=PortalRoute, include_in_schema=False)

DAY_S = 86_400
LATEST_ALERTS = 5
MAX_IDLE_JOBS = 50
JOB_STATES = ("PENDING", "SCHEDULED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
SEVERITIES = ("critical", "warning", "info")
SERIES_TTL_S = 60.0


@dataclass
class GpuCounts:
    total: int = 0
    used: int = 0
    free: int = 0

    @property
    def unavailable(self) -> int:
        """Neither held nor placeable: on a drained or unreachable node, or lost."""
        return self.total - self.used - self.free


@dataclass(frozen=True)
class VcTypeUsage:
    gpu_type: str
    quota: int
    guaranteed: int
    borrowed: int

    @property
    def free(self) -> int:
        """What the VC's quota still guarantees it."""
        return max(0, self.quota - self.guaranteed)


@dataclass
class VcUsage:
    name: str
    types: list[VcTypeUsage] = field(default_factory=list)


def gpus_per_type(models: list[GpuModelCount]) -> dict[str, GpuCounts]:
    """Per GPU type (``H100``), as VC quotas name them: models of one type add up."""
    totals: dict[str, GpuCounts] = {}
    for row in models:
        counts = totals.setdefault(gpu_type_of(row.model), GpuCounts())
        counts.total += row.total
        counts.used += row.used
        counts.free += row.free
    return dict(sorted(totals.items()))


def vc_usage(row: VcRow) -> VcUsage:
    """A VC's quota and what its jobs hold, per GPU type (as the API's VC view counts it)."""
    held: dict[str, list[int]] = {}
    for item in row.usage:
        pair = held.setdefault(gpu_type_of(item["model"] or ""), [0, 0])
        pair[1 if item["borrowed"] else 0] += int(item["gpus"])
    types = sorted(set(row.quota) | set(held))
    return VcUsage(
        row.name,
        [VcTypeUsage(t, row.quota.get(t, 0), held.get(t, [0, 0])[0], held.get(t, [0, 0])[1]) for t in types],
    )


def _own(user: PortalUser) -> str | None:
    """Whose jobs a user sees: their own; an admin, everyone's (None)."""
    return None if user.is_admin else user.username


async def _gpus(user: PortalUser, db: Db, cluster: ClusterRepo) -> dict[str, Any]:
    per_type = gpus_per_type(await HomeRepository(db).gpus_by_model())
    vcs = [vc_usage(r) for r in await cluster.list_vcs(None, user.principal.vc_user)]
    return {"per_type": per_type, "vcs": vcs}


class UtilisationSeries:
    """The cluster's utilisation series, shared by every home page of this API process
    for ``SERIES_TTL_S``. It is the same for every user and gains a bucket every 5
    minutes, while computing it reads a day of every GPU's history: a hundred open tabs
    refreshing on each telemetry tick would otherwise each read it again."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()  # one query at a time; the others wait and share it
        self._read_at = -math.inf
        self._points: list[UtilisationPoint] = []

    async def points(self, db: Database) -> list[UtilisationPoint]:
        async with self._lock:
            if time.monotonic() - self._read_at > SERIES_TTL_S:
                self._points = await HomeRepository(db).utilisation_series(COARSE_S, DAY_S)
                self._read_at = time.monotonic()
            return self._points


async def utilisation_series(request: Request) -> UtilisationSeries:
    """This process's series (``routes.install_portal`` makes it)."""
    series: UtilisationSeries = request.app.state.portal_utilisation
    return series


Series = Annotated[UtilisationSeries, Depends(utilisation_series)]


async def _utilisation(db: Db, series: UtilisationSeries) -> dict[str, Any]:
    points = await series.points(db)
    chart = {
        "title": "Cluster GPU utilisation, last 24 h",
        "unit": "%",
        "max": 100,
        "x": [p.at_s for p in points],
        "series": [
            {
                "label": "mean of all GPUs",
                "values": [
                    None if p.utilisation_pct is None else round(p.utilisation_pct, 1) for p in points
                ],
            }
        ],
    }
    latest = next((p.utilisation_pct for p in reversed(points) if p.utilisation_pct is not None), None)
    return {"chart": chart, "latest_pct": latest, "resolution_min": COARSE_S // 60}


async def _jobs(user: PortalUser, db: Db) -> dict[str, Any]:
    counts = await HomeRepository(db).job_states(_own(user), DAY_S)
    return {"job_counts": [(s, counts.get(s, 0)) for s in JOB_STATES]}


async def _alerts(user: PortalUser, db: Db) -> dict[str, Any]:
    found = await HomeRepository(db).open_alerts(_own(user), LATEST_ALERTS)
    known = [(s, found.per_severity.get(s, 0)) for s in SEVERITIES]
    others = sorted((s, n) for s, n in found.per_severity.items() if s not in SEVERITIES)
    return {
        "alert_counts": known + others,
        "alerts_open": sum(found.per_severity.values()),
        "latest_alerts": found.latest,
    }


async def _idle(user: PortalUser, db: Db, settings: ApiSettings) -> dict[str, Any]:
    jobs = await HomeRepository(db).idle_jobs(
        settings.portal_idle_gpu_minutes * 60, settings.portal_idle_gpu_pct, _own(user), MAX_IDLE_JOBS
    )
    return {
        "idle_jobs": jobs,
        "idle_pct": settings.portal_idle_gpu_pct,
        "idle_minutes": settings.portal_idle_gpu_minutes,
        # Cancelling is a submit-scope request, as POST /api/v1/jobs/{id}/cancel is.
        "may_stop": "submit" in user.principal.scopes,
    }


@router.get("/", response_class=HTMLResponse)
async def home(
    request: Request, user: SignedIn, db: Db, cluster: ClusterRepo, settings: SettingsDep, series: Series
) -> HTMLResponse:
    # The panels' queries at once, each on its own connection: the page costs the
    # slowest of them, not their sum.
    panels = await asyncio.gather(
        _gpus(user, db, cluster),
        _utilisation(db, series),
        _jobs(user, db),
        _alerts(user, db),
        _idle(user, db, settings),
    )
    context: dict[str, Any] = {}
    for panel in panels:
        context.update(panel)
    return render(request, "home.html", user, section="home", title="Home", **context)


@router.get("/home/gpus", response_class=HTMLResponse)
async def gpus_panel(request: Request, user: SignedIn, db: Db, cluster: ClusterRepo) -> HTMLResponse:
    return render(request, "fragments/home_gpus.html", user, **await _gpus(user, db, cluster))


@router.get("/home/utilisation", response_class=HTMLResponse)
async def utilisation_panel(request: Request, user: SignedIn, db: Db, series: Series) -> HTMLResponse:
    return render(request, "fragments/home_utilisation.html", user, **await _utilisation(db, series))


@router.get("/home/jobs", response_class=HTMLResponse)
async def jobs_panel(request: Request, user: SignedIn, db: Db) -> HTMLResponse:
    return render(request, "fragments/home_jobs.html", user, **await _jobs(user, db))


@router.get("/home/alerts", response_class=HTMLResponse)
async def alerts_panel(request: Request, user: SignedIn, db: Db) -> HTMLResponse:
    return render(request, "fragments/home_alerts.html", user, **await _alerts(user, db))


@router.get("/home/idle", response_class=HTMLResponse)
async def idle_panel(request: Request, user: SignedIn, db: Db, settings: SettingsDep) -> HTMLResponse:
    return render(request, "fragments/home_idle.html", user, **await _idle(user, db, settings))


@router.post("/home/idle/{job_id}/stop")
async def stop_idle_job(
    request: Request,
    job_id: Annotated[str, Path(pattern=JOB_ID)],
    user: SignedInForm,
    jobs: JobsRepo,
    db: Db,
    settings: SettingsDep,
) -> Response:
    """Cancel the job as the API's cancel does: its owner or an admin; anyone else's job
    is not found; a job that already ended is a conflict."""
    principal = user.principal
    await cancel_job(
        jobs, job_id, principal.username, lambda owner: principal.is_admin or owner == principal.username
    )
    if not request.headers.get("HX-Request"):
        return RedirectResponse("/", status_code=303)
    stopped = f"stop requested for {job_id}: its tasks get SIGTERM, then SIGKILL after the grace period"
    return render(
        request, "fragments/home_idle.html", user, stopped=stopped, **await _idle(user, db, settings)
    )
