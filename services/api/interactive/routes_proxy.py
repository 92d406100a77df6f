"""``/proxy/{job_id}/{task}/{label}/{path}``: a task's labelled port, over HTTP, any method.

A notebook, TensorBoard or any web app in a task is reached through the API, by its
owner (or an admin with a token: ``access.py``), with a bearer token or the portal's
session cookie: a browser following a link from the job's page needs nothing more. Each
request is one forward stream to the port (``proxy.py``) and one ``proxy`` row in the
sessions audit. The role's ``proxy_prefix`` says what path the app sees: ``strip`` (the
default, as ``kubectl proxy``) sends ``/path``; ``keep`` sends the whole
``/proxy/…/path``, for an app told its base URL (``CORRAL_PROXY_PATH_<LABEL>``: Jupyter's
``base_url``, TensorBoard's ``path_prefix``).

A browser without a session is sent to sign in and back; other clients get the 401.
A WebSocket to the same path (a Jupyter kernel's channels) is the app's WebSocket,
relayed message by message (``proxy_ws.py``), one ``proxy`` row for its whole life.
A browser sends its cookies with a WebSocket opened by any site's page, so one that
comes with the portal's cookie must come from the API's own origin (its ``Origin``
header), or it is refused before the upgrade: no other site's script speaks to a task
as its owner.

A request's answer is streamed after the route returns; ``ForwardedResponse`` closes the
forward stream and completes the audit row however the sending ends, even when it is
cancelled before the body is read at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from urllib.parse import quote

import anyio
from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from starlette.requests import HTTPConnection
from starlette.types import Receive, Scope, Send

from services.api.interactive.access import Caller, caller_of, check_may_enter
from services.api.interactive.dependencies import InteractiveRepo, MaybeCookies, MaybeNats, Settings
from services.api.interactive.nodes import open_stream, stream_id_of
from services.api.interactive.proxy import HttpOverStream, Where, request_headers, response_headers
from services.api.interactive.proxy_ws import AppWebSocket, relay_messages
from services.api.interactive.repository import InteractiveRepository, NewSession
from services.api.interactive.routes_sessions import new_session_id
from services.api.interactive.targets import Target, port_of, running_task
from services.api.problems import problem
from services.api.settings import ApiSettings
from shared.errors import CorralError, Forbidden, TransientError
from shared.interactive.protocol import OpenRequest
from shared.interactive.stream import StreamEnd

router = APIRouter(include_in_schema=False)
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


@router.api_route("/proxy/{job_id}/{task}/{label}", methods=["GET", "HEAD"])
async def proxy_root(request: Request) -> Response:
    """The app's root is its prefix with the slash: relative links resolve under it."""
    query = f"?{request.url.query}" if request.url.query else ""
    return RedirectResponse(f"{request.url.path}/{query}", status_code=308)


@router.api_route("/proxy/{job_id}/{task}/{label}/{path:path}", methods=METHODS)
async def proxy(
    job_id: str,
    task: str,
    label: str,
    path: str,
    request: Request,
    repo: InteractiveRepo,
    cookies: MaybeCookies,
    nc: MaybeNats,
    settings: Settings,
) -> Response:
    try:
        caller = await caller_of(request, cookies)
    except CorralError as exc:
        # No credential, or a portal session that ended (the portal's own 401).
        if exc.status == 401 and request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse("/login?next=" + quote(back, safe="/"), status_code=303)
        raise
    job = check_may_enter(caller, await repo.job(job_id), job_id)
    target = await running_task(repo, job, task)
    port = port_of(target, label)
    if nc is None:
        raise TransientError("this API reaches no nodes (it runs without a message bus); try again later")
    prefix = f"/proxy/{job_id}/{task}/{label}"
    sent_path = _sent_path(request.scope, prefix, path, target.role.proxy_prefix)
    query = request.scope.get("query_string", b"")
    session_id = await _record_open(
        repo, caller, target, label, port, [request.method, sent_path.decode(errors="replace")]
    )
    opening = _forward(session_id, target, caller, label, port, settings)
    try:
        stream = await open_stream(nc, target.attempt.node_id, opening, settings.interactive_open_timeout_s)
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            await _record(repo, session_id, f"not opened: {getattr(exc, 'detail', type(exc).__name__)}", 0, 0)
        raise
    http = HttpOverStream(stream, f"port {port} ({label}) of task {target.task}")
    where = Where(
        prefix=prefix,
        proto=request.url.scheme,
        host=request.headers.get("host", ""),
        client=request.client.host if request.client else "",
    )
    headers = request_headers(list(request.headers.raw), port, where, drop_authorization=not caller.by_cookie)
    try:
        await http.send_request(
            request.method, sent_path + (b"?" + query if query else b""), headers, request.stream()
        )
        status, answer_headers = await http.response()
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            await stream.close("the request failed")
            await _record(
                repo, session_id, f"failed: {getattr(exc, 'detail', type(exc).__name__)}", http.bytes_in, 0
            )
        raise

    response = ForwardedResponse(http, stream, repo, session_id, status)
    response.raw_headers = response_headers(answer_headers)
    return response


class ForwardedResponse(StreamingResponse):
    """The app's answer, its body streamed as it comes; whatever ends the sending (the
    body's end, the client leaving, a cancel before the body was ever read), the forward
    stream is closed and the audit row completed."""

    def __init__(
        self,
        http: HttpOverStream,
        stream: StreamEnd,
        repo: InteractiveRepository,
        session_id: str,
        status: int,
    ) -> None:
        self._http, self._stream, self._repo, self._session_id = http, stream, repo, session_id
        self._reason = "the client left"
        super().__init__(self._body(), status_code=status)

    async def _body(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._http.body():
                yield chunk
        except CorralError as exc:
            self._reason = f"failed: {exc.detail}"
            raise
        self._reason = f"answered {self.status_code}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._stream.close("")
                await _record(
                    self._repo, self._session_id, self._reason, self._http.bytes_in, self._http.bytes_out
                )


@router.websocket("/proxy/{job_id}/{task}/{label}/{path:path}")
async def proxy_websocket(
    job_id: str,
    task: str,
    label: str,
    path: str,
    ws: WebSocket,
    repo: InteractiveRepo,
    cookies: MaybeCookies,
    nc: MaybeNats,
    settings: Settings,
) -> None:
    """The app's WebSocket (a Jupyter kernel's channels), relayed message by message
    (``proxy_ws.py``); refused before the upgrade as the proxy refuses a request."""
    try:
        caller = await caller_of(ws, cookies)
        if caller.by_cookie:
            _require_own_origin(ws)
        job = check_may_enter(caller, await repo.job(job_id), job_id)
        target = await running_task(repo, job, task)
        port = port_of(target, label)
        if nc is None:
            raise TransientError("this API reaches no nodes (it runs without a message bus); try again later")
    except CorralError as exc:
        await ws.send_denial_response(problem(403, "forbidden", "Forbidden", exc.detail, ws.url.path))
        return
    prefix = f"/proxy/{job_id}/{task}/{label}"
    sent_path = _sent_path(ws.scope, prefix, path, target.role.proxy_prefix)
    query = ws.scope.get("query_string", b"")
    session_id = await _record_open(
        repo, caller, target, label, port, ["WEBSOCKET", sent_path.decode(errors="replace")]
    )
    reason, app = "not opened", None
    try:
        stream = await open_stream(
            nc,
            target.attempt.node_id,
            _forward(session_id, target, caller, label, port, settings),
            settings.interactive_open_timeout_s,
        )
        try:
            where = Where(
                prefix,
                "wss" if ws.url.scheme == "wss" else "ws",
                ws.headers.get("host", ""),
                ws.client.host if ws.client else "",
            )
            headers = request_headers(
                list(ws.headers.raw), port, where, drop_authorization=not caller.by_cookie
            )
            target_path = (sent_path + (b"?" + query if query else b"")).decode("latin-1")
            app = AppWebSocket(
                stream, port, target_path, headers, f"port {port} ({label}) of task {target.task}"
            )
            answer = await app.handshake()
            await ws.accept(subprotocol=answer.headers.get("Sec-WebSocket-Protocol"))
            code = await relay_messages(ws, app)
            reason = f"the app closed the WebSocket ({code})" if code != 1000 else "closed"
            with contextlib.suppress(Exception):
                await ws.close(code if code in (1000, 1001, 1008, 1011) or 3000 <= code < 5000 else 1000)
        finally:
            with anyio.CancelScope(shield=True):
                await stream.close("")
    except CorralError as exc:
        reason = f"not opened: {exc.detail}"
        with contextlib.suppress(Exception):
            await ws.send_denial_response(problem(403, "forbidden", "Forbidden", exc.detail, ws.url.path))
    finally:
        with anyio.CancelScope(shield=True):
            moved = (app.bytes_in, app.bytes_out) if app is not None else (0, 0)
            await _record(repo, session_id, reason, *moved)


def _require_own_origin(conn: HTTPConnection) -> None:
    """``Forbidden`` unless the WebSocket's ``Origin`` is the API's own origin (the scheme
    and the ``Host`` it was reached at): a page of another site may open a WebSocket with
    the browser's cookies, but not with this origin."""
    scheme = "https" if conn.url.scheme in ("https", "wss") else "http"
    own = f"{scheme}://{conn.url.netloc}"
    origin = conn.headers.get("origin", "")
    if origin.lower() != own.lower():
        raise Forbidden(
            f"a WebSocket signed in with the portal's cookie must come from {own}'s own pages"
            f" (its Origin was {origin or 'not sent'}); other clients send a bearer token"
        )


def _sent_path(scope: Scope, prefix: str, path: str, proxy_prefix: str) -> bytes:
    """The path the app sees: the whole one (``keep``), or what follows the prefix."""
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
    rest = raw_path[len(prefix) :] if raw_path.startswith(prefix.encode()) else b"/" + path.encode()
    return raw_path if proxy_prefix == "keep" else (rest or b"/")


async def _record_open(
    repo: InteractiveRepository, caller: Caller, target: Target, label: str, port: int, command: list[str]
) -> str:
    """A ``proxy`` row for one request or WebSocket, connected at once; its id."""
    session_id = new_session_id()
    await repo.insert(
        NewSession(
            id=session_id,
            kind="proxy",
            job_id=target.job.id,
            task_role=target.role.name,
            task_index=target.index,
            attempt_id=target.attempt.id,
            node_id=target.attempt.node_id,
            username=caller.username,
            token_id=caller.token_id,
            credential_sha256=caller.credential_sha256,
            command=[command[0], command[1][:1024]],
            tty=False,
            stdin=True,
            cols=80,
            rows=24,
            port_label=label,
            port=port,
            connected=True,
        )
    )
    return session_id


def _forward(
    session_id: str, target: Target, caller: Caller, label: str, port: int, settings: ApiSettings
) -> OpenRequest:
    return OpenRequest(
        stream_id=stream_id_of(session_id),
        kind="forward",
        attempt_id=target.attempt.id,
        job_id=target.job.id,
        task_role=target.role.name,
        task_index=target.index,
        user=caller.username,
        port=port,
        port_label=label,
        idle_timeout_s=settings.interactive_idle_timeout_s,
    )


async def _record(
    repo: InteractiveRepository, session_id: str, reason: str, bytes_in: int, bytes_out: int
) -> None:
    await repo.record_close(session_id, reason, None, bytes_in, bytes_out)
