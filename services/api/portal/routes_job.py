"""``/jobs/{job_id}``: one job, its tasks, timeline, why it waits, logs and GPUs; cancel and resubmit.

The page reads and acts through the jobs slice, as ``/api/v1/jobs/{id}`` does: the same
row (with the scheduler's pending reason and queue position), the same attempts, the
same visibility (someone else's job is "not found" to a user), ``cancellation.py`` for a
cancel and ``Submitter`` for a resubmit. Its forms post with the session's CSRF token.

Live: while the job has not finished, its panel sits in an element connected to
``/live/job?job=<id>`` and fetches itself again (``/jobs/<id>/panel``) when an event of
the job arrives, replacing the connected element too. Once the job has finished, that
panel comes back without the connection, so the page stops following the job by itself.
Task logs are in the panel as elements htmx preserves across those swaps (one per
attempt), so a log being followed is never cut short by a refresh
(``routes_job_logs.py``).

The timeline is the job's events from JetStream (``jobs/history.py``); an API without a
message bus, or with JetStream unreachable, shows what Postgres knows instead and says so.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import yaml
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from services.api.audit import set_audit_target
from services.api.dependencies import MaybeJetStream
from services.api.jobs.cancellation import cancel_job
from services.api.jobs.dependencies import JobsRepo, Shapes
from services.api.jobs.history import job_history
from services.api.jobs.repository import AttemptRow, JobRow
from services.api.jobs.submission import Submitter
from services.api.portal.dependencies import SignedIn, SignedInForm
from services.api.portal.errors import PortalRoute
from services.api.portal.rendering import render
from services.api.portal.repository_jobs import GpuPoint
from services.api.portal.routes_jobs import JobPages, visible_job
from services.api.portal.session import PortalUser
from shared.clock import utcnow
from shared.errors import InvalidInput
from shared.jobs import JobSpec, JobState

log = logging.getLogger(__name__)

router = APIRouter(route_class=PortalRoute, include_in_schema=False)

MAX_TIMELINE_EVENTS = 500
# 10 s rows are kept a day (monitor), so a chart reaching further back reads the 300 s ones.
FINE_RESOLUTION_S, COARSE_RESOLUTION_S = 10, 300
FINE_HISTORY = timedelta(hours=23)
# What a timeline entry shows of an event's data, in this order.
_EVENT_FIELDS = {
    "node_id": "node ",
    "exit_code": "exit code ",
    "signal": "signal ",
    "classification": "",
    "reason": "",
    "requested_by": "by ",
}


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
async def job_page(
    request: Request, job_id: str, user: SignedIn, repo: JobsRepo, pages: JobPages, js: MaybeJetStream
) -> HTMLResponse:
    job = await visible_job(repo, job_id, user)
    context = await _panel_context(job, user, repo, pages, js)
    spec_yaml = yaml.safe_dump(job.spec, sort_keys=False, allow_unicode=True, width=100)
    return render(
        request,
        "job.html",
        user,
        section="jobs",
        title=f"{job.name} ({job.id})",
        spec_yaml=spec_yaml,
        **context,
    )


@router.get("/jobs/{job_id}/panel", response_class=HTMLResponse)
async def job_panel(
    request: Request, job_id: str, user: SignedIn, repo: JobsRepo, pages: JobPages, js: MaybeJetStream
) -> HTMLResponse:
    """The live part of the page alone: what it fetches when the job's events arrive."""
    job = await visible_job(repo, job_id, user)
    context = await _panel_context(job, user, repo, pages, js)
    return render(request, "fragments/job_panel.html", user, **context)


@router.post("/jobs/{job_id}/cancel")
async def cancel(job_id: str, user: SignedInForm, repo: JobsRepo) -> RedirectResponse:
    """As ``POST /api/v1/jobs/{id}/cancel``: a 404 page for a job not theirs, a 409 page
    for one that already ended."""
    await cancel_job(repo, job_id, user.username, lambda owner: user.is_admin or owner == user.username)
    return RedirectResponse(f"/jobs/{job_id}", status_code=303)


@router.post("/jobs/{job_id}/resubmit")
async def resubmit(
    request: Request, job_id: str, user: SignedInForm, repo: JobsRepo, shapes: Shapes
) -> RedirectResponse:
    """As ``POST /api/v1/jobs/{id}/resubmit``: a new job of the same spec, tags and secrets,
    submitted by this user now (with a submit's checks); the browser goes to it. Its audit
    row names the new job, as the API's does."""
    old = await visible_job(repo, job_id, user)
    spec = JobSpec.model_validate(old.spec)
    if spec.kind == "service":  # its service's controller replaces a replica, never a resubmit
        raise InvalidInput(
            "a service's replica is not resubmitted: its service keeps its replicas running;"
            " scale or update the service instead (its page is linked from this job's)"
        )
    submitted = await Submitter(repo, shapes).submit(
        spec,
        user.username,
        user.principal.vc_user,
        secrets_from=job_id,
        tags=list(old.tags),
    )
    set_audit_target(request, submitted.job.id)
    return RedirectResponse(f"/jobs/{submitted.job.id}", status_code=303)


async def _panel_context(
    job: JobRow, user: PortalUser, repo: JobsRepo, pages: JobPages, js: MaybeJetStream
) -> dict[str, Any]:
    state = JobState(job.state)
    attempts = await repo.attempts_of_job(job.id)
    spec = JobSpec.model_validate(job.spec)
    timeline, from_bus = await _timeline(job, attempts, js)
    return {
        "job": job,
        "spec": spec,
        "finished": state.is_terminal,
        "may_cancel": not state.is_terminal and (user.is_admin or job.username == user.username),
        "tasks": tasks_of(spec, attempts),
        # Roles holding a share of a GPU: the share, shown beside the GPU's index.
        "shares": {role.name: f"{role.resources.gpus:g}" for role in spec.tasks if role.resources.gpu_milli},
        "waiting": waiting(job, utcnow()),
        "timeline": timeline,
        "timeline_from_bus": from_bus,
        "charts": await _charts(job, attempts, pages),
    }


def tasks_of(spec: JobSpec, attempts: list[AttemptRow]) -> list[tuple[str, list[AttemptRow]]]:
    """Every task of the spec (``main-0``...) with its attempts, oldest first."""
    by_task: dict[str, list[AttemptRow]] = {}
    for attempt in attempts:
        by_task.setdefault(f"{attempt.task_role}-{attempt.task_index}", []).append(attempt)
    names = [f"{role.name}-{i}" for role in spec.tasks for i in range(role.instances)]
    return [(name, by_task.get(name, [])) for name in names]


def waiting(job: JobRow, now: datetime) -> dict[str, Any] | None:
    """Why a pending job waits, as ``corral why`` tells it; None once it is not pending."""
    if job.state != JobState.PENDING.value:
        return None
    if job.not_before is not None and job.not_before > now:
        # A job backing off before its next attempt is not considered until then.
        return {"retrying": True, "reason": job.reason or "retrying", "not_before": job.not_before}
    if job.pending_reason is None:
        return {"considered": False}
    return {
        "considered": True,
        "reason": job.pending_reason,
        "detail": job.pending_detail,
        "position": job.pending_position,
        "since": job.pending_since,
        "estimated_start": job.pending_estimated_start,
    }


async def _timeline(
    job: JobRow, attempts: list[AttemptRow], js: MaybeJetStream
) -> tuple[list[tuple[datetime, str, str]], bool]:
    """(when, what, details) oldest first, and whether it came from the event streams."""
    if js is not None:
        nodes = sorted({a.node_id for a in attempts})
        try:
            documents = await job_history(js, job.id, job.created_at, nodes, MAX_TIMELINE_EVENTS)
        except Exception:  # JetStream away or slow: the page still shows what Postgres knows
            log.warning("reading the events of %s failed; showing the database's", job.id, exc_info=True)
        else:
            tasks = {a.id: f"task {a.task_role}-{a.task_index} attempt {a.attempt_no}" for a in attempts}
            entries = [timeline_entry(d, tasks) for d in documents]
            return [e for e in entries if e is not None], True
    return db_timeline(job, attempts), False


def timeline_entry(document: dict[str, Any], tasks: dict[str, str]) -> tuple[datetime, str, str] | None:
    """One event as a line of the timeline; ``tasks`` names the task of each attempt id
    (task events carry the attempt's id). None for a document without a readable time."""
    try:
        when = datetime.fromisoformat(str(document.get("time")))
    except ValueError:
        return None
    kind = str(document.get("type", "")).removeprefix("corral.").rsplit(".v", 1)[0].replace(".", " ")
    kind = kind.replace("_", " ")
    data = document.get("data") or {}
    facts = [f"{tasks[data['attempt_id']]}"] if data.get("attempt_id") in tasks else []
    placements = data.get("placements")
    if isinstance(placements, list) and placements:
        nodes = sorted({str(p.get("node_id")) for p in placements if isinstance(p, dict)})
        facts.append(f"{len(placements)} tasks on {', '.join(nodes)}")
    shown = dict(data)
    if kind == "task exited" and shown.get("exit_code") == 0:
        # A clean exit: its classification and "exited with code 0" say nothing more.
        shown.pop("classification", None)
        shown.pop("reason", None)
    facts += [f"{label}{shown[k]}" for k, label in _EVENT_FIELDS.items() if shown.get(k) not in (None, "")]
    return when, kind, ", ".join(facts)


def db_timeline(job: JobRow, attempts: list[AttemptRow]) -> list[tuple[datetime, str, str]]:
    """What the job's and attempts' rows say happened, when the events cannot be read."""
    entries = [(job.created_at, "job submitted", f"by {job.username} to {job.virtual_cluster}")]
    for a in attempts:
        task = f"task {a.task_role}-{a.task_index} attempt {a.attempt_no}"
        entries.append((a.created_at, f"{task} placed", f"node {a.node_id}, GPUs {a.gpu_indices}"))
        if a.started_at is not None:
            entries.append((a.started_at, f"{task} started", f"node {a.node_id}"))
        if a.finished_at is not None:
            code = f"exit code {a.exit_code}" if a.exit_code is not None else a.state.lower()
            entries.append((a.finished_at, f"{task} ended", ", ".join(filter(None, [code, a.reason]))))
    if job.cancel_requested_at is not None and job.state != JobState.CANCELLED.value:
        entries.append((job.cancel_requested_at, "cancel requested", ""))
    if job.finished_at is not None:
        entries.append((job.finished_at, f"job {job.state.lower()}", job.reason))
    return sorted(entries, key=lambda entry: entry[0])


async def _charts(job: JobRow, attempts: list[AttemptRow], pages: JobPages) -> list[dict[str, Any]] | None:
    """The two charts' ``data-chart`` documents, or None when the job never ran."""
    started = [a.started_at for a in attempts if a.started_at is not None]
    if not started:
        return None
    since = min(started)
    fine = utcnow() - since <= FINE_HISTORY
    points = await pages.gpu_series(job.id, FINE_RESOLUTION_S if fine else COARSE_RESOLUTION_S, since)
    return [
        _chart(
            "GPU utilisation", "%", 100, points, [("mean", "utilization_avg"), ("highest", "utilization_max")]
        ),
        _chart("GPU memory used (all its GPUs)", "GiB", None, points, [("used", "memory_used_gib")]),
    ]


def _chart(
    title: str, unit: str, top: float | None, points: list[GpuPoint], series: list[tuple[str, str]]
) -> dict[str, Any]:
    return {
        "title": title,
        "unit": unit,
        "max": top,
        "decimals": 0 if unit == "%" else 1,
        "x": [p.at_s for p in points],
        "series": [
            {"label": label, "values": [getattr(p, field) for p in points]} for label, field in series
        ],
    }
