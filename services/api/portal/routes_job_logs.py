"""A task's log on its job's page: its tail, then, while the attempt runs, what it writes.

The log is asked of the node that ran the task, as ``GET /api/v1/jobs/{id}/logs`` asks
it (``jobs/logs.py``: core NATS request/reply, a piece at a time). The page loads each
task's tail as a fragment (``.../log``) and, while the attempt is live, connects to
``.../log/live?offset=<where the tail ended>``: server-sent events that htmx appends to
the ``<pre>`` (``sse-swap="log"``, ``hx-swap="beforeend"``).

Why batch and escape here: a task printing thousands of lines a second would otherwise
make as many messages and DOM insertions; the stream sends what arrived since the last
message at most once a ``FOLLOW_INTERVAL_S``, as HTML-escaped text (a log is the task's
text, and it is inserted as HTML). Each message carries its end offset as its event id,
so a browser that reconnects (``Last-Event-ID``) resumes where it was rather than
repeating the log. Like ``/live``, the stream checks every ``CORRAL_API_SSE_REAUTH_S``
that its session still holds, and says it is alive when the task is quiet. It ends with
an ``end`` event (``sse-close="end"``) once the attempt has ended and everything it wrote
was sent, or with a line saying why it stopped (the node stopped answering for
``CORRAL_API_NODE_LOGS_TIMEOUT_S``, or refused, or the session ended).
"""

from __future__ import annotations

import asyncio
import codecs
import html
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import HTMLResponse, StreamingResponse

from services.api.dependencies import SettingsDep
from services.api.jobs.dependencies import JobsRepo, MaybeNodes
from services.api.jobs.logs import LIVE_STATES, AttemptLog, NodeNotAnswering
from services.api.jobs.repository import JobRepository, LogAttempt
from services.api.portal.dependencies import PortalSessions, SignedIn
from services.api.portal.errors import PortalRoute
from services.api.portal.rendering import render
from services.api.portal.routes_jobs import visible_job
from services.api.portal.session import PortalUser
from shared.errors import CorralError, NotFound
from shared.node_logs import CHUNK_BYTES

router = APIRouter(route_class=PortalRoute, include_in_schema=False)
# What the log panel says once its stream ends (it replaces "Following while the task runs").
FOLLOWING_ENDED = "Not following any more: the task ended (or the stream stopped; reload to look again)."

TAIL_BYTES = 64 * 1024
FOLLOW_INTERVAL_S = 1.0
# At most this much in one message: a task that writes faster is sent in several.
MAX_MESSAGE_BYTES = 256 * 1024
TASK = r"^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?-\d{1,6}$"
NO_NODES = "this API has no message bus to ask nodes for logs; `corral logs` reads them where one runs"

Task = Annotated[str, Path(pattern=TASK, description="<role>-<index>, e.g. main-0")]
AttemptNo = Annotated[int, Query(ge=1, le=1_000_000)]


async def _attempt(repo: JobRepository, user: PortalUser, job_id: str, task: str, attempt: int) -> LogAttempt:
    await visible_job(repo, job_id, user)
    role, _, index = task.rpartition("-")
    row = await repo.attempt_for_logs(job_id, role, int(index), attempt)
    if row is None or not row.log_path:
        raise NotFound(f"no log yet for attempt {attempt} of task {task} of job {job_id}; it has not started")
    return row


@router.get("/jobs/{job_id}/tasks/{task}/log", response_class=HTMLResponse)
async def task_log(
    request: Request,
    job_id: str,
    task: Task,
    attempt: AttemptNo,
    user: SignedIn,
    repo: JobsRepo,
    ask: MaybeNodes,
    settings: SettingsDep,
) -> HTMLResponse:
    row = await _attempt(repo, user, job_id, task, attempt)
    text, offset, problem = "", 0, None
    if ask is None:
        problem = NO_NODES
    else:
        try:
            data, offset = await tail(AttemptLog(ask, repo, row, settings.node_logs_timeout_s), TAIL_BYTES)
            text = data.decode("utf-8", errors="replace")
        except CorralError as exc:  # the node silent, or the log gone: said in the panel
            problem = exc.detail
    return render(
        request,
        "fragments/job_log.html",
        user,
        job_id=job_id,
        task=task,
        attempt=row,
        text=text,
        offset=offset,
        problem=problem,
        follow=problem is None and row.state in LIVE_STATES,
    )


async def tail(log: AttemptLog, limit: int) -> tuple[bytes, int]:
    """The last ``limit`` bytes of the log as it was when asked, and where they end."""
    head = await log.read(0, 0)
    if not head.exists:
        return b"", 0
    end = head.size
    offset = max(0, end - limit)
    out = bytearray()
    while offset < end:
        chunk = await log.read(offset, min(CHUNK_BYTES, end - offset))
        if not chunk.data:
            break  # cut short meanwhile
        out += chunk.data
        offset += len(chunk.data)
    return bytes(out), offset


@router.get("/jobs/{job_id}/tasks/{task}/log/live")
async def follow_task_log(
    request: Request,
    job_id: str,
    task: Task,
    attempt: AttemptNo,
    user: SignedIn,
    sessions: PortalSessions,
    repo: JobsRepo,
    ask: MaybeNodes,
    settings: SettingsDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
) -> StreamingResponse:
    row = await _attempt(repo, user, job_id, task, attempt)
    if last_event_id is not None and last_event_id.isdigit():
        offset = int(last_event_id)  # a reconnect: resume after what was already sent

    async def still_signed_in() -> bool:
        try:
            return (await sessions.user(request)).principal == user.principal
        except Exception:  # any refusal means the same: stop following
            return False

    if ask is None:
        stream: AsyncIterator[bytes] = _closing(NO_NODES)
    else:
        following = Following(
            AttemptLog(ask, repo, row, settings.node_logs_timeout_s),
            repo,
            row.id,
            still_signed_in,
            patience_s=settings.node_logs_timeout_s,
            keepalive_s=settings.sse_keepalive_s,
            reauth_s=settings.sse_reauth_s,
        )
        stream = following.events(offset)
    return StreamingResponse(
        stream,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@dataclass
class Following:
    """One browser following one attempt's log (see the module's docstring)."""

    log: AttemptLog
    repo: JobRepository
    attempt_id: str
    still_allowed: Callable[[], Awaitable[bool]]
    patience_s: float
    keepalive_s: float
    reauth_s: float
    interval_s: float = FOLLOW_INTERVAL_S

    async def events(self, offset: int) -> AsyncIterator[bytes]:
        """``log`` messages of what the attempt writes from ``offset`` on, at most one an
        ``interval_s``, then ``end`` once it has ended and all it wrote was sent."""
        loop = asyncio.get_running_loop()
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        yield b"retry: 3000\n\n"
        last_sent = check_at = loop.time()
        silent_since: float | None = None
        while True:
            if loop.time() - check_at >= self.reauth_s:
                if not await self.still_allowed():
                    yield message("log", "\n[corral] your session ended; reload the page to sign in again\n")
                    yield message("end", FOLLOWING_ENDED)
                    return
                check_at = loop.time()
            # The end state first, then the read: lines written just before exiting are not lost.
            ended = await self.repo.attempt_state(self.attempt_id) not in LIVE_STATES
            pending = bytearray()
            try:
                while len(pending) < MAX_MESSAGE_BYTES:
                    chunk = await self.log.read(offset + len(pending))
                    if not chunk.data:
                        break
                    pending += chunk.data
            except NodeNotAnswering as exc:
                # A node restarting answers again within moments; one that is gone never.
                silent_since = loop.time() if silent_since is None else silent_since
                if loop.time() - silent_since >= self.patience_s:
                    yield message("log", html.escape(f"\n[corral] {exc.detail}\n"))
                    yield message("end", FOLLOWING_ENDED)
                    return
            except CorralError as exc:  # the node refused, or the log is gone
                yield message("log", html.escape(f"\n[corral] {exc.detail}\n"))
                yield message("end", FOLLOWING_ENDED)
                return
            else:
                silent_since = None
            if pending:
                offset += len(pending)
                last_sent = loop.time()
                yield message("log", html.escape(decoder.decode(bytes(pending))), event_id=str(offset))
                if len(pending) >= MAX_MESSAGE_BYTES:
                    continue  # more is waiting: no pause, but still one message at a time
            elif ended and silent_since is None:
                yield message("end", FOLLOWING_ENDED)
                return
            elif loop.time() - last_sent >= self.keepalive_s:
                last_sent = loop.time()
                yield b": keep-alive\n\n"
            await asyncio.sleep(self.interval_s)


async def _closing(why: str) -> AsyncIterator[bytes]:
    yield message("log", html.escape(f"\n[corral] {why}\n"))
    yield message("end", FOLLOWING_ENDED)


def message(event: str, data: str, event_id: str | None = None) -> bytes:
    """One server-sent event; each line of ``data`` its own ``data:`` line, as the format
    requires (the browser joins them with newlines again)."""
    lines = data.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    head = f"event: {event}\n" + (f"id: {event_id}\n" if event_id is not None else "")
    return (head + "".join(f"data: {line}\n" for line in lines) + "\n").encode()
