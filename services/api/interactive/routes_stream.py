"""``GET /api/v1/sessions/{id}/stream``: a session's WebSocket.

Before the upgrade, the connection proves it is the session's creator: the same
credential (bearer token or portal cookie), verified again now (a token revoked or
expired since is refused), within ``CONNECT_WITHIN_S`` of asking, and only once (the
row's ``connected_at`` is set by one UPDATE that only a first, timely, matching connect
passes), and may still go into the job as when it asked (``check_may_enter``: the
owner or an admin, the ``exec`` scope, the VC's ``interactive`` switch). Anything else is
a 403 with a problem document saying why, before any WebSocket exists. Then the node is
asked to open its end; if it cannot (the task ended in between, the node does not
answer), the WebSocket is accepted only to say so: a Status on channel 3 for an exec,
the error channel 1 for a port-forward, then a close with 1011.

An open session is as good as its caller's right to it: every ``RECHECK_EVERY_S`` the
credential is verified again and the same rules applied, and a token revoked or
expired, a user no longer allowed or a VC switched off closes the WebSocket with 1008
and the reason (the stream closed, the audit row saying why).

The session ends when the client leaves, when the node closes the stream (the command
exited, the task ended, the idle timeout) or when the API shuts down; whichever it is,
the stream is closed so the node stops the process, and the audit row records the end.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable

import anyio
from fastapi import APIRouter, Path, WebSocket
from nats.aio.client import Client
from starlette.websockets import WebSocketState

from services.api.interactive.access import caller_of, check_may_enter
from services.api.interactive.dependencies import InteractiveRepo, MaybeCookies, MaybeNats, Settings
from services.api.interactive.nodes import open_stream, stream_id_of
from services.api.interactive.relay import (
    NORMAL,
    POLICY_VIOLATION,
    SERVER_ERROR,
    Outcome,
    close_reason,
    failure_status,
    relay,
)
from services.api.interactive.repository import ClaimedSession, InteractiveRepository
from services.api.interactive.routes_sessions import CONNECT_WITHIN_S
from services.api.problems import problem
from shared.errors import CorralError, Forbidden, TransientError
from shared.interactive.protocol import KUBERNETES_SUBPROTOCOLS, Channel, OpenRequest
from shared.interactive.stream import StreamEnd

log = logging.getLogger(__name__)
router = APIRouter()
SESSION_ID_PATTERN = r"^ses_[A-Za-z0-9_-]{32}$"
SHUT_DOWN = "the API shut down"
GOING_AWAY = 1001
# How often an open session's caller is verified again (a revoked token, a VC switched off).
RECHECK_EVERY_S = 60.0
WITHDRAWN = "access withdrawn: "


@router.websocket("/api/v1/sessions/{session_id}/stream")
async def session_stream(
    ws: WebSocket,
    repo: InteractiveRepo,
    cookies: MaybeCookies,
    nc: MaybeNats,
    settings: Settings,
    session_id: str = Path(pattern=SESSION_ID_PATTERN),
) -> None:
    try:
        if nc is None:
            raise TransientError("this API reaches no nodes (it runs without a message bus); try again later")
        caller = await caller_of(ws, cookies)
        session = await repo.claim_connection(session_id, caller.credential_sha256, CONNECT_WITHIN_S)
        if session is None:
            raise Forbidden(await _why_refused(repo, session_id, caller.credential_sha256))
    except CorralError as exc:
        # Refused before the upgrade: always 403, whatever the cause (an unknown or used
        # session says nothing more to a stranger than a wrong token does).
        await ws.send_denial_response(problem(403, "forbidden", "Forbidden", exc.detail, ws.url.path))
        return
    claimed = session

    async def still_allowed() -> None:
        """Raises the ``CorralError`` that says why, if the caller may no longer go in."""
        again = await caller_of(ws, cookies)
        check_may_enter(again, await repo.job(claimed.job_id), claimed.job_id)

    try:
        # Claimed, so the row is this connection's: a refusal now is recorded on it.
        await still_allowed()
    except CorralError as exc:
        with anyio.CancelScope(shield=True):
            await repo.record_close(session.id, f"refused: {exc.detail}", None, 0, 0)
        await ws.send_denial_response(problem(403, "forbidden", "Forbidden", exc.detail, ws.url.path))
        return
    await _serve(
        ws,
        repo,
        session,
        nc,
        still_allowed,
        settings.interactive_open_timeout_s,
        settings.interactive_idle_timeout_s,
    )


async def _serve(
    ws: WebSocket,
    repo: InteractiveRepository,
    session: ClaimedSession,
    nc: Client,
    still_allowed: Callable[[], Awaitable[None]],
    open_timeout_s: float,
    idle_timeout_s: float,
) -> None:
    request = OpenRequest(
        stream_id=stream_id_of(session.id),
        kind="exec" if session.kind == "exec" else "forward",
        attempt_id=session.attempt_id,
        job_id=session.job_id,
        task_role=session.task_role,
        task_index=session.task_index,
        user=session.username,
        command=session.command,
        tty=session.tty,
        stdin=session.stdin,
        cols=session.cols,
        rows=session.rows,
        port=session.port,
        port_label=session.port_label,
        idle_timeout_s=idle_timeout_s,
    )
    # What the audit says if the relay never returns: the API cancelled it, shutting down.
    outcome = Outcome(reason=SHUT_DOWN)
    # The newest framing the client offered (a client that offers none gets v4's framing
    # unnamed, as it asked for nothing).
    offered = ws.scope.get("subprotocols") or []
    try:
        # Inside the try: a client gone during the upgrade still gets its row closed.
        try:
            await ws.accept(subprotocol=next((p for p in KUBERNETES_SUBPROTOCOLS if p in offered), None))
        except Exception:  # the client went away mid-upgrade (it is said several ways)
            outcome.reason = "the client left during the upgrade"
            return
        try:
            stream = await open_stream(nc, session.node_id, request, open_timeout_s)
        except CorralError as exc:
            outcome.reason = f"not opened: {exc.detail}"
            await _say_not_opened(ws, session.kind, exc.detail)
            return
        except Exception as exc:  # the bus itself failing: said, recorded, raised
            outcome.reason = f"not opened: {type(exc).__name__}: {exc}"
            await _say_not_opened(ws, session.kind, "the API could not reach the node; try again")
            raise
        log.info(
            "interactive %s %s by %s into %s %s-%s on %s",
            session.kind,
            session.id,
            session.username,
            session.job_id,
            session.task_role,
            session.task_index,
            session.node_id,
        )
        try:
            withdrawn = await _relay_while_allowed(ws, stream, session.kind, outcome, still_allowed)
            if withdrawn is not None:
                outcome.reason = WITHDRAWN + withdrawn
                with contextlib.suppress(Exception):
                    await ws.close(POLICY_VIOLATION, close_reason(outcome.reason))
        finally:
            with anyio.CancelScope(shield=True):
                await stream.close(outcome.reason)
    finally:
        with anyio.CancelScope(shield=True):
            await repo.record_close(
                session.id, outcome.reason, outcome.exit_code, outcome.bytes_in, outcome.bytes_out
            )
            if ws.application_state != WebSocketState.DISCONNECTED:
                with contextlib.suppress(Exception):
                    await ws.close(GOING_AWAY if outcome.reason == SHUT_DOWN else NORMAL)


async def _relay_while_allowed(
    ws: WebSocket,
    stream: StreamEnd,
    kind: str,
    outcome: Outcome,
    still_allowed: Callable[[], Awaitable[None]],
) -> str | None:
    """Relay until the session ends (``outcome`` says how), or until the caller may no
    longer go in: then the relay is stopped and the reason returned."""
    withdrawn: str | None = None
    async with anyio.create_task_group() as tg:

        async def recheck() -> None:
            nonlocal withdrawn
            while True:
                await anyio.sleep(RECHECK_EVERY_S)
                try:
                    await still_allowed()
                except CorralError as exc:
                    withdrawn = exc.detail
                except Exception as exc:  # not verifiable now: the session does not go on unverified
                    withdrawn = f"the caller could not be verified again ({type(exc).__name__}: {exc})"
                if withdrawn is not None:
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(recheck)
        await relay(ws, stream, kind, outcome)
        tg.cancel_scope.cancel()
    return withdrawn


async def _say_not_opened(ws: WebSocket, kind: str, detail: str) -> None:
    with contextlib.suppress(Exception):
        if kind == "exec":
            await ws.send_bytes(bytes([Channel.STATUS]) + failure_status(detail))
        else:
            await ws.send_bytes(bytes([Channel.STDOUT]) + detail.encode())
        await ws.close(SERVER_ERROR, close_reason(detail))


async def _why_refused(repo: InteractiveRepository, session_id: str, credential_sha256: str) -> str:
    state = await repo.state(session_id, CONNECT_WITHIN_S)
    if state is None:
        return f"no session {session_id}; ask for one with POST /api/v1/jobs/{{job_id}}/sessions"
    if state.credential_sha256 != credential_sha256:
        return f"session {session_id} was asked for with another credential; connect with the same one"
    if state.connected_at is not None or state.closed_at is not None:
        return f"session {session_id} was already connected; a session connects once: ask for a new one"
    return (
        f"session {session_id} was not connected within {CONNECT_WITHIN_S:g} s of asking for it;"
        " ask for a new one"
    )
