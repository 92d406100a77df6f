"""``/api/v1/jobs``: submit, read, list, logs.

A user reads, cancels and follows the logs of their own jobs only (admins: every job);
someone else's job is "not found", so its existence does not leak. Submitting needs a VC
the user may use (``routes_vcs.py``). A user keeps seeing their own jobs in a VC their
groups lost access to: the jobs are theirs, and they may still want to cancel them.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse

from services.api.audit import set_audit_target
from services.api.auth import AuthenticatedPrincipal, Principal
from services.api.deps import ask_scheduler, repository
from services.api.logs import follow_log
from services.api.repository import ApiRepository
from services.api.views import DryRunView, JobList, JobView
from shared.dry_run import DryRunAnswer, DryRunRequest
from shared.errors import NotFound, TransientError
from shared.jobs import JobSpec, JobState

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])

_TASK_RE = re.compile(r"^([a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?)-(\d{1,6})$")
MAX_LOG_BYTES = 4 * 1024 * 1024


async def _visible_job(repo: ApiRepository, job_id: str, principal: Principal) -> dict[str, object]:
    job = await repo.get_job(job_id)
    if job is None or not (principal.is_admin or job["username"] == principal.username):
        raise NotFound(f"no job with id {job_id!r}; list your jobs with GET /api/v1/jobs")
    return job


@router.post("", status_code=201, operation_id="submitJob", response_model=JobView)
async def submit_job(spec: JobSpec, request: Request, principal: AuthenticatedPrincipal) -> JobView:
    """Submit a job to a VC you may use. It starts ``PENDING`` and is queued for placement."""
    job = await repository(request).submit_job(spec, principal.username, principal.vc_user)
    set_audit_target(request, job["id"])
    return JobView.from_rows(job, [])


@router.post("/dry-run", operation_id="dryRunJob", response_model=DryRunView)
async def dry_run(spec: JobSpec, request: Request, principal: AuthenticatedPrincipal) -> DryRunView:
    """Where would this job go, and when? The scheduler's answer as if it were submitted now,
    with nothing stored: its placement, or why it would wait, its position and estimated
    start. A job that can never run gets the 422 a submit would get."""
    await repository(request).check_submittable(spec, principal.vc_user)
    question = DryRunRequest(spec=spec, user=principal.username).model_dump_json().encode()
    answer = DryRunAnswer.model_validate_json(await ask_scheduler(request, question))
    if answer.error:
        raise TransientError(f"the scheduler could not answer: {answer.error}")
    return DryRunView.from_answer(answer)


@router.get("", operation_id="listJobs", response_model=JobList)
async def list_jobs(
    request: Request,
    principal: AuthenticatedPrincipal,
    state: JobState | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> JobList:
    """The most recent jobs first (yours; every job for admins)."""
    rows = await repository(request).list_jobs(state.value if state else None, limit)
    visible = [r for r in rows if principal.is_admin or r["username"] == principal.username]
    return JobList(items=[JobView.from_rows(r, []) for r in visible])


@router.get("/{job_id}", operation_id="getJob", response_model=JobView)
async def get_job(job_id: str, request: Request, principal: AuthenticatedPrincipal) -> JobView:
    """One job with every attempt of every task: node, GPU indices, exit code."""
    repo = repository(request)
    job = await _visible_job(repo, job_id, principal)
    return JobView.from_rows(dict(job), await repo.attempts_of_job(job_id))


@router.post("/{job_id}/cancel", operation_id="cancelJob", response_model=JobView)
async def cancel_job(job_id: str, request: Request, principal: AuthenticatedPrincipal) -> JobView:
    """Cancel a job: at once if it is pending, else its tasks are stopped (SIGTERM, then
    SIGKILL after a grace period) and it ends ``CANCELLED``. Repeating it is harmless."""
    repo = repository(request)
    await repo.cancel_job(
        job_id, principal.username, lambda owner: principal.is_admin or owner == principal.username
    )
    job = await _visible_job(repo, job_id, principal)
    return JobView.from_rows(dict(job), await repo.attempts_of_job(job_id))


@router.get(
    "/{job_id}/logs",
    operation_id="getJobLogs",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}}}},
)
async def get_logs(
    job_id: str,
    request: Request,
    principal: AuthenticatedPrincipal,
    task: Annotated[str | None, Query(max_length=80, description="<role>-<index>, e.g. main-0")] = None,
    attempt: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
    follow: Annotated[bool, Query(description="stream until the attempt ends")] = False,
) -> Response:
    """stdout and stderr of one task attempt (default: the first task, latest attempt).

    With ``follow=true`` the response streams: what the log holds now, then whatever the
    task writes, until the attempt has ended and everything it wrote was sent."""
    repo = repository(request)
    job = await _visible_job(repo, job_id, principal)
    if task is None:
        spec = JobSpec.model_validate(job["spec"])
        role, index = spec.tasks[0].name, 0
    else:
        match = _TASK_RE.match(task)
        if not match:
            raise NotFound(f"task {task!r} is not of the form <role>-<index>, e.g. main-0")
        role, index = match.group(1), int(match.group(3))
    row = await repo.attempt_for_logs(job_id, role, index, attempt)
    if row is None or not row["log_path"]:
        which = f"attempt {attempt} of " if attempt else ""
        raise NotFound(f"no logs yet for {which}task {role}-{index} of job {job_id}; it has not started")
    if follow:
        return StreamingResponse(
            follow_log(repo, row["id"], Path(row["log_path"])), media_type="text/plain; charset=utf-8"
        )
    text = await asyncio.to_thread(_read_tail, Path(row["log_path"]), MAX_LOG_BYTES)
    return PlainTextResponse(text)


def _read_tail(path: Path, limit: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        raise NotFound(f"the log file of this attempt is gone ({path.name})") from None
