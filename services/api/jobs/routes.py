"""``/api/v1/jobs``: submit (JSON, YAML, OpenPAI v2), dry run, list, read, cancel,
resubmit, attempts, tags, events, logs.

A user reads, cancels and follows the logs of their own jobs only (admins: every job);
someone else's job is "not found", so its existence does not leak. Submitting needs a VC
the user may use (``submission.py``; VCs are the cluster slice's). A user keeps seeing
their own jobs in a VC their groups lost access to: the jobs are theirs, and they may
still want to cancel them.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse

from services.api.audit import AuditEntry, audited_with_change, set_audit_target
from services.api.dependencies import MaybeJetStream, SettingsDep
from services.api.jobs.body import OPENAPI_BODY, SubmittedJob, add_warnings, read_job
from services.api.jobs.cancellation import cancel_job as cancel
from services.api.jobs.dependencies import JobsRepo, MaybeNodes, MaybeScheduler, Shapes
from services.api.jobs.history import MAX_JOB_EVENTS, job_history
from services.api.jobs.idempotency import HEADER as IDEMPOTENCY_HEADER
from services.api.jobs.idempotency import REPLAYED_HEADER, IdempotencyKey, check_key
from services.api.jobs.logs import AttemptLog
from services.api.jobs.models import AttemptList, AttemptView, DryRunView, JobEvents, JobList, JobView, Tags
from services.api.jobs.pages import MAX_TAGS, TAG_PATTERN, JobCursor
from services.api.jobs.repository import JobRepository, JobRow
from services.api.jobs.submission import Submitter
from services.api.settings import ApiSettings
from services.api.tenants.auth import AuthenticatedPrincipal, Principal
from shared.dry_run import DryRunAnswer, DryRunRequest
from shared.errors import InvalidInput, NotFound, TransientError
from shared.jobs import NAME_PATTERN, JobSpec, JobState
from shared.request_types import Timestamp

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])

_TASK_RE = re.compile(r"^([a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?)-(\d{1,6})$")
MAX_LOG_BYTES = 4 * 1024 * 1024


async def _visible_job(repo: JobRepository, job_id: str, principal: Principal) -> JobRow:
    job = await repo.get_job(job_id)
    if job is None or not (principal.is_admin or job.username == principal.username):
        raise NotFound(f"no job with id {job_id!r}; list your jobs with GET /api/v1/jobs")
    return job


async def _check_event_sources(repo: JobRepository, spec: JobSpec, principal: Principal) -> None:
    """A role's ``event_files_from`` copies another job's files into it: the submitter
    must be allowed to read that job, as if they asked for its logs."""
    for role in spec.tasks:
        source = role.event_files_from
        if source is None:
            continue
        job = await repo.get_job(source)
        if job is None or not (principal.is_admin or job.username == principal.username):
            raise InvalidInput(
                f"tasks.{role.name}.event_files_from names job {source!r}, which does not exist or is not"
                " yours; name one of your own jobs (GET /api/v1/jobs lists them)"
            )


def _not_a_service(spec: JobSpec) -> None:
    """A service is not submitted as one job: its replicas are jobs that the service
    controller keeps running (services/api/serving/)."""
    if spec.kind == "service":
        raise InvalidInput(
            "kind: a kind: service spec creates a service, not a job: send it to POST /api/v1/services"
            " (corral service create -f SPEC, or corral submit, which does that for you)"
        )


SUBMITTED = 201
# What a submit (and so a resubmit, a dry run) is refused for beyond the token itself.
SUBMIT_FORBIDDEN = (
    "the token lacks the submit scope, or the virtual cluster is not one you may use (or, for a "
    "user, does not exist: the two are not told apart)"
)
SUBMIT_INVALID = (
    "a field is wrong (`errors` names it), the virtual cluster does not exist (admins), or no "
    "registered node could ever hold the job (more GPUs, CPUs or memory than any node has), or an "
    "input names a model version or artifact that does not exist or that you may not read (`inputs[i]`)"
)


@router.post(
    "",
    status_code=SUBMITTED,
    operation_id="submitJob",
    response_model=JobView,
    openapi_extra=OPENAPI_BODY,
    responses={
        201: {"description": "created; a replay of an Idempotency-Key answers 201 with the first job"},
        400: {"description": "the body is not valid JSON (malformed-json) or YAML (malformed-yaml)"},
        403: {"description": SUBMIT_FORBIDDEN},
        415: {"description": "a body that is neither JSON nor YAML"},
        422: {
            "description": SUBMIT_INVALID
            + "; or the Idempotency-Key was used for another request (idempotency-key-reused)"
        },
        429: {"description": "too many requests for this token (Retry-After)"},
        503: {
            "description": "nothing was stored: the database is away (unavailable) or out of "
            "resources (disk-full, database-out-of-resources); retry after Retry-After"
        },
    },
)
async def submit_job(
    request: Request,
    response: Response,
    principal: AuthenticatedPrincipal,
    repo: JobsRepo,
    shapes: Shapes,
    settings: SettingsDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias=IDEMPOTENCY_HEADER,
            max_length=255,
            description="retry-safe submit: the same key and request return the first job",
        ),
    ] = None,
) -> JobView:
    """Submit a job to a VC you may use: Corral's spec as JSON or YAML, or an OpenPAI job
    protocol v2 document. It starts ``PENDING`` and is queued for placement.

    Refused, with nothing stored: a VC you may not use (403), and a job no registered node
    could ever hold, or a VC that does not exist (422, which the schema cannot say)."""
    job = await _read(request, settings)
    _not_a_service(job.spec)
    await _check_event_sources(repo, job.spec, principal)
    key = None
    if idempotency_key is not None:
        key = IdempotencyKey(check_key(idempotency_key), job.digest, settings.idempotency_retention_s)
    entry = AuditEntry.of(request.scope)
    submitted = await Submitter(repo, shapes).submit(
        job.spec,
        principal.username,
        principal.vc_user,
        secrets=job.secrets,
        idempotency=key,
        audit=(entry, SUBMITTED) if entry is not None else None,
    )
    if submitted.replayed:
        response.headers[REPLAYED_HEADER] = "true"
    add_warnings(response, job.warnings)
    set_audit_target(request, submitted.job.id)
    if submitted.audited:
        audited_with_change(request, SUBMITTED)
    return JobView.from_rows(submitted.job, [])


async def _read(request: Request, settings: ApiSettings) -> SubmittedJob:
    return await read_job(request, settings.max_body_bytes)


@router.post(
    "/dry-run",
    operation_id="dryRunJob",
    response_model=DryRunView,
    openapi_extra=OPENAPI_BODY,
    responses={
        400: {"description": "the body is not valid JSON (malformed-json) or YAML (malformed-yaml)"},
        403: {"description": SUBMIT_FORBIDDEN},
        415: {"description": "a body that is neither JSON nor YAML"},
        422: {"description": SUBMIT_INVALID},
        503: {
            "description": "the scheduler did not answer (or this API has no message bus), or the "
            "database is away or out of resources"
        },
    },
)
async def dry_run(
    request: Request,
    principal: AuthenticatedPrincipal,
    repo: JobsRepo,
    shapes: Shapes,
    settings: SettingsDep,
    ask: MaybeScheduler,
) -> DryRunView:
    """Where would this job go, and when? The scheduler's answer as if it were submitted now,
    with nothing stored: its placement, or why it would wait, its position and estimated
    start. A job that can never run gets the 422 a submit would get. Takes what a submit
    takes (JSON, YAML, OpenPAI v2)."""
    spec = (await _read(request, settings)).spec
    await Submitter(repo, shapes).check(spec, principal.username, principal.vc_user)
    if ask is None:
        raise TransientError("this API serves no scheduler questions (no message bus); try again later")
    question = DryRunRequest(spec=spec, user=principal.username).model_dump_json().encode()
    try:
        answer = DryRunAnswer.model_validate_json(await ask(question))
    except TimeoutError:
        raise TransientError(
            "the scheduler did not answer in time; is it running? (GET /api/v1/services)"
        ) from None
    if answer.error:
        raise TransientError(f"the scheduler could not answer: {answer.error}")
    return DryRunView.from_answer(answer)


@router.get(
    "",
    operation_id="listJobs",
    response_model=JobList,
    responses={
        422: {
            "description": "a parameter is wrong (`errors` names it), or `cursor` is not one this "
            "API handed out"
        }
    },
)
async def list_jobs(
    principal: AuthenticatedPrincipal,
    repo: JobsRepo,
    state: Annotated[list[JobState] | None, Query(max_length=6, description="repeatable")] = None,
    virtual_cluster: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    user: Annotated[str | None, Query(pattern=NAME_PATTERN, description="admins: anyone's")] = None,
    name: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    tag: Annotated[
        list[Annotated[str, Query(pattern=TAG_PATTERN)]] | None,
        Query(max_length=MAX_TAGS, description="repeatable: jobs with every tag given"),
    ] = None,
    since: Annotated[Timestamp | None, Query(description="submitted at or after")] = None,
    until: Annotated[Timestamp | None, Query(description="submitted before")] = None,
    cursor: Annotated[str | None, Query(max_length=200, pattern=r"^[A-Za-z0-9_=-]+$")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> JobList:
    """The most recent jobs first (yours; every job for admins), filtered, a page at a time:
    ``next_cursor`` of one page, given as ``cursor``, yields the next (older) one. A keyset,
    not an offset, so jobs submitted meanwhile neither repeat nor shift a page. A cursor
    the API did not hand out is refused (422)."""
    owner = user if principal.is_admin else principal.username
    if user is not None and user != owner:
        return JobList(items=[])  # another user's jobs: none that you may see
    after = JobCursor.parse(cursor) if cursor else None
    rows = await repo.list_jobs(
        [s.value for s in state] if state else None,
        virtual_cluster,
        owner,
        name,
        sorted(set(tag)) if tag else None,
        since,
        until,
        (after.created_at, after.job_id) if after else None,
        limit + 1,
    )
    page = [JobView.from_rows(r, []) for r in rows[:limit]]
    more = len(rows) > limit
    return JobList(items=page, next_cursor=JobCursor.of(rows[limit - 1]).encode() if more else None)


@router.get("/{job_id}", operation_id="getJob", response_model=JobView)
async def get_job(job_id: str, principal: AuthenticatedPrincipal, repo: JobsRepo) -> JobView:
    """One job with every attempt of every task: node, GPU indices, exit code."""
    job = await _visible_job(repo, job_id, principal)
    return JobView.from_rows(job, await repo.attempts_of_job(job_id))


@router.post(
    "/{job_id}/cancel",
    operation_id="cancelJob",
    response_model=JobView,
    responses={409: {"description": "the job already ended; there is nothing to cancel"}},
)
async def cancel_job(job_id: str, principal: AuthenticatedPrincipal, repo: JobsRepo) -> JobView:
    """Cancel a job: at once if it is pending, else its tasks are stopped (SIGTERM, then
    SIGKILL after a grace period) and it ends ``CANCELLED``. Repeating it is harmless while
    it stops; a job that already ended is a 409."""
    await cancel(
        repo, job_id, principal.username, lambda owner: principal.is_admin or owner == principal.username
    )
    job = await _visible_job(repo, job_id, principal)
    return JobView.from_rows(job, await repo.attempts_of_job(job_id))


@router.get(
    "/{job_id}/logs",
    operation_id="getJobLogs",
    response_class=PlainTextResponse,
    responses={
        200: {"content": {"text/plain": {}}},
        404: {"description": "no such job (or not yours), task or attempt, or the task has not started"},
        502: {"description": "the node answered, but did not serve the log (node-refused)"},
        503: {"description": "the node that ran the task is not answering (since when: the detail)"},
    },
)
async def get_logs(
    job_id: str,
    principal: AuthenticatedPrincipal,
    repo: JobsRepo,
    settings: SettingsDep,
    ask: MaybeNodes,
    task: Annotated[str | None, Query(max_length=80, description="<role>-<index>, e.g. main-0")] = None,
    attempt: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
    follow: Annotated[bool, Query(description="stream until the attempt ends")] = False,
) -> Response:
    """stdout and stderr of one task attempt (default: the first task, latest attempt).

    With ``follow=true`` the response streams: what the log holds now, then whatever the
    task writes, until the attempt has ended and everything it wrote was sent. The log is
    asked of the node that ran the task: a node that does not answer is a 503 saying since
    when (while following, the stream ends with a line saying so)."""
    job = await _visible_job(repo, job_id, principal)
    spec = JobSpec.model_validate(job.spec)
    if task is None:
        role, index = spec.tasks[0].name, 0
    else:
        match = _TASK_RE.match(task)
        if not match:
            raise NotFound(f"task {task!r} is not of the form <role>-<index>, e.g. main-0")
        role, index = match.group(1), int(match.group(3))
        if not any(t.name == role and index < t.instances for t in spec.tasks):
            raise NotFound(f"job {job_id} has no task {task}; its tasks are {_task_names(spec)}")
    row = await repo.attempt_for_logs(job_id, role, index, attempt)
    if row is None or not row.log_path:
        which = f"attempt {attempt} of " if attempt else ""
        raise NotFound(f"no logs yet for {which}task {role}-{index} of job {job_id}; it has not started")
    if ask is None:
        raise TransientError("this API serves no task logs (no message bus to ask nodes); try again later")
    log = AttemptLog(ask, repo, row, patience_s=settings.node_logs_timeout_s)
    if follow:
        await log.check_followable()
        return StreamingResponse(log.follow(), media_type="text/plain; charset=utf-8")
    text = (await log.tail(MAX_LOG_BYTES)).decode("utf-8", errors="replace")
    return PlainTextResponse(text)


def _task_names(spec: JobSpec) -> str:
    """``main-0, worker-0 … worker-7``: every task of the job, for a 404 that says what exists."""
    return ", ".join(
        f"{t.name}-0" if t.instances == 1 else f"{t.name}-0 … {t.name}-{t.instances - 1}" for t in spec.tasks
    )


@router.post(
    "/{job_id}/resubmit",
    status_code=201,
    operation_id="resubmitJob",
    response_model=JobView,
    responses={
        403: {"description": SUBMIT_FORBIDDEN},
        422: {"description": SUBMIT_INVALID},
        429: {"description": "too many submits for this token (Retry-After)"},
    },
)
async def resubmit_job(
    job_id: str, request: Request, principal: AuthenticatedPrincipal, repo: JobsRepo, shapes: Shapes
) -> JobView:
    """A new job with the same spec (and tags and secrets), submitted by you now: for a job
    that failed or was cancelled, or to run one again. The checks of a submit apply to you
    (your VCs); the old job is untouched."""
    old = await _visible_job(repo, job_id, principal)
    spec = JobSpec.model_validate(old.spec)
    _not_a_service(spec)
    submitted = await Submitter(repo, shapes).submit(
        spec, principal.username, principal.vc_user, secrets_from=job_id, tags=list(old.tags)
    )
    set_audit_target(request, submitted.job.id)
    return JobView.from_rows(submitted.job, [])


@router.get("/{job_id}/attempts", operation_id="listJobAttempts", response_model=AttemptList)
async def list_attempts(job_id: str, principal: AuthenticatedPrincipal, repo: JobsRepo) -> AttemptList:
    """Every attempt of every task of the job, oldest first per task: node, host, ports,
    GPUs, exit code and signal, how the ending was classified, when."""
    await _visible_job(repo, job_id, principal)
    attempts = await repo.attempts_of_job(job_id)
    return AttemptList(items=[AttemptView.model_validate(a, from_attributes=True) for a in attempts])


@router.put("/{job_id}/tags", operation_id="setJobTags", response_model=Tags)
async def set_tags(job_id: str, tags: Tags, principal: AuthenticatedPrincipal, repo: JobsRepo) -> Tags:
    """Replace the job's tags (``[]`` clears them); find jobs by tag with
    ``GET /api/v1/jobs?tag=...``. Tags are labels for people and scripts: they change
    nothing about how the job runs."""
    await _visible_job(repo, job_id, principal)
    return Tags(tags=await repo.set_job_tags(job_id, sorted(set(tags.tags))))


@router.get(
    "/{job_id}/events",
    operation_id="listJobEvents",
    response_model=JobEvents,
    responses={503: {"description": "this API has no message bus, or the database is away"}},
)
async def list_job_events(
    job_id: str,
    principal: AuthenticatedPrincipal,
    repo: JobsRepo,
    js: MaybeJetStream,
    limit: Annotated[int, Query(ge=1, le=MAX_JOB_EVENTS)] = 1000,
) -> JobEvents:
    """The job's lifecycle so far, oldest first: each event the CloudEvents document that
    SSE, webhooks and NATS carry (submitted, scheduled, task started/exited, retrying,
    ended...), read from the ``CORRAL_JOBS`` stream (kept a week)."""
    job = await _visible_job(repo, job_id, principal)
    if js is None:
        raise TransientError("this API serves no events (no message bus); try again later")
    nodes = sorted({a.node_id for a in await repo.attempts_of_job(job_id)})
    events = await job_history(js, job_id, job.created_at, nodes, limit + 1)
    return JobEvents(items=events[:limit], truncated=len(events) > limit)
