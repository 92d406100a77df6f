"""``POST /api/v1/jobs/{job_id}/sessions`` and ``GET /api/v1/sessions``: asking for an
exec or port-forward session into a running task, and the audit of every session.

Asking checks everything that can be checked without the node (who, which task, that it
runs, the port's label) and records the session; nothing is opened on the node until its
WebSocket connects (``routes_stream.py``), so a session asked for and never used costs
the node nothing. The answer's ``stream_url`` must be opened within
``CONNECT_WITHIN_S``, once, with the same credential.
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Query, Request

from services.api.interactive.access import Caller, check_may_enter
from services.api.interactive.dependencies import InteractiveRepo
from services.api.interactive.models import SessionCreated, SessionList, SessionRecord, SessionSpec
from services.api.interactive.repository import NewSession
from services.api.interactive.targets import port_of, running_task
from services.api.tenants.auth import AuthenticatedPrincipal
from shared.errors import InvalidInput, NotFound

router = APIRouter(tags=["interactive"])
# How soon after asking a session's WebSocket must connect.
CONNECT_WITHIN_S = 30.0
JOB_ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"


def new_session_id() -> str:
    return "ses_" + secrets.token_urlsafe(24)  # 32 URL-safe characters, 192 random bits


@router.post(
    "/api/v1/jobs/{job_id}/sessions",
    status_code=201,
    operation_id="createSession",
    response_model=SessionCreated,
    responses={
        403: {"description": "the token lacks the exec scope, or the job's VC has interactive access off"},
        404: {
            "description": "no such job (or not yours), no such task (the detail lists them) or port label"
        },
        409: {"description": "the job or the task is not running (the detail says its state)"},
    },
)
async def create_session(
    job_id: str, spec: SessionSpec, request: Request, principal: AuthenticatedPrincipal, repo: InteractiveRepo
) -> SessionCreated:
    """Ask for an exec or port-forward session into a running task of your job.

    The answer's ``stream_url`` is a WebSocket (subprotocol ``v4.channel.k8s.io``) to open
    within 30 s, once, with the same token: exec sends stdin on channel 0 and resizes on
    4, and gets stdout (1), stderr (2) and a Status (3) at the end; port-forward sends and
    gets the port's bytes on channel 0."""
    caller = Caller(principal, request.state.token_digest, principal.token_id or "", by_cookie=False)
    job = check_may_enter(caller, await repo.job(job_id), job_id)
    target = await running_task(repo, job, spec.task)
    port, label = 0, ""
    if spec.kind == "port-forward":
        if spec.port is None:
            labels = ", ".join(sorted(target.attempt.ports)) or "none"
            raise InvalidInput(
                f"a port-forward names the port's label as 'port'; task {target.task} has: {labels}"
            )
        label, port = spec.port, port_of(target, spec.port)
    elif spec.port is not None:
        raise InvalidInput("'port' is for port-forward sessions; an exec takes 'command'")
    session_id = new_session_id()
    created_at = await repo.insert(
        NewSession(
            id=session_id,
            kind=spec.kind,
            job_id=job.id,
            task_role=target.role.name,
            task_index=target.index,
            attempt_id=target.attempt.id,
            node_id=target.attempt.node_id,
            username=caller.username,
            token_id=caller.token_id,
            credential_sha256=caller.credential_sha256,
            command=list(spec.command),
            tty=spec.tty,
            stdin=spec.stdin,
            cols=spec.cols,
            rows=spec.rows,
            port_label=label,
            port=port,
        )
    )
    return SessionCreated(
        id=session_id,
        kind=spec.kind,
        job_id=job.id,
        task=target.task,
        node_id=target.attempt.node_id,
        stream_url=f"/api/v1/sessions/{session_id}/stream",
        expires_at=created_at + timedelta(seconds=CONNECT_WITHIN_S),
    )


@router.get(
    "/api/v1/sessions",
    operation_id="listSessions",
    response_model=SessionList,
    responses={404: {"description": "`job_id` names no job of yours"}},
)
async def list_sessions(
    principal: AuthenticatedPrincipal,
    repo: InteractiveRepo,
    job_id: Annotated[str | None, Query(pattern=JOB_ID_PATTERN, description="into this job only")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> SessionList:
    """The audit of interactive sessions, newest first: into your jobs (admins: any job),
    whoever opened them; who, which task on which node, when, how long, how it ended, the
    exit code and the bytes each way."""
    owner = None if principal.is_admin else principal.username
    if job_id is not None and owner is not None:
        job = await repo.job(job_id)
        if job is None or job.username != owner:
            raise NotFound(f"no job with id {job_id!r}; list your jobs with GET /api/v1/jobs")
    rows = await repo.sessions(job_id, owner, limit)
    return SessionList(items=[SessionRecord.from_row(r) for r in rows])
