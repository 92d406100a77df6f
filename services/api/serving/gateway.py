"""``/serve/{name}/...``: requests to a service, passed to one of its ready replicas.

A raw ASGI middleware, outermost in the API's stack (``services/api/app.py``), so a
request to a service never goes through FastAPI's routing, the body limit, the rate
limit, the audit log or the per-route metrics: the gateway is on the path of every call
an application makes to a model, and what it adds to each should be well under the
replica's own time. Everything it does per request is in memory: the service's route
(``endpoints.py``, read from Postgres at most twice a second), the caller's token (the
API's ``TokenCache``), a kept-alive connection to the replica (``upstream.py``) and a
count (``traffic.py``).

Who may call: anyone, if the service is ``public``; else a bearer token whose user owns
the service, or an admin's, with the ``serve`` scope. Names do not leak: without a valid
token, a name that is no service's and a service that is not public are the same 401;
with one, a service the caller may not see is answered as one that does not exist
(404). A token without ``serve`` is a 403 that says which scope is missing. With no ready
replica, 503 and ``Retry-After``, with the service's reason (scaled to zero, each
replica's state) for whoever may read the service, and a generic one for anyone else (a
public service's job ids are not the world's business).

Bodies stream both ways; what the replica gets of the caller's headers and the caller of
the replica's is ``headers.py``'s: no credentials of Corral's either way, and every answer
sandboxed (a service is served from the API's own origin).

A replica holds nothing for long: its answer must start within ``ANSWER_TIMEOUT_S``
(else 504) and no read of its body may wait longer than ``IDLE_TIMEOUT_S``
(``upstream.py``); and once the request body is in hand, a caller that disconnects ends
the exchange at once (``CallerWatch``): the replica's connection is closed, not pooled,
and the request counted as 499. Without that, a replica that never answers or streams
without end would hold a task and two connections as long as it liked, since the
server's ``send`` does nothing once its caller is gone.

Replicas come and go. Each request goes to the next ready replica in turn; one that
refuses the connection (killed, its node gone) is marked down here for a few seconds
(``endpoints.py``), and the request goes once to another replica: nothing was sent, so
that is safe for any request. A kept-alive connection that closes before the first byte
of the answer (the replica died, or closed it while idle) is tried again on a fresh
connection when the request is idempotent and its body is in hand.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator

from fastapi import FastAPI
from starlette.requests import HTTPConnection

from services.api.problems import ProblemSlug, problem
from services.api.serving.endpoints import Endpoint, EndpointTable, ServiceRoute
from services.api.serving.headers import CONFINED, answer_headers, request_head
from services.api.serving.traffic import METER
from services.api.serving.upstream import (
    Answer,
    ConnectFailed,
    NoAnswer,
    Pool,
    TooSlow,
    UpstreamError,
    read_answer,
    send_request,
)
from services.api.tenants.auth import principal_of_bearer
from shared.db.pool import DATABASE_ERRORS, Database
from shared.errors import Unauthorized
from shared.metrics import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

PREFIX = "/serve/"
_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$")
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
_CALLER_LEFT = 499  # counted so: nginx's "client closed request"
# Replicas a request is offered to when the ones before it cannot be reached: the rotation is
# read twice a second, so a replica killed since may still be in it, and two killed at once
# must not cost a request its answer; a bound, because on a real network an unreachable host
# costs a connect timeout each.
CONNECT_TRIES = 3
# A replica that failed to answer, by whether it was too slow to.
_UNANSWERED: dict[bool, tuple[int, ProblemSlug]] = {
    False: (502, "node-refused"),
    True: (504, "node-not-answering"),
}


def install_gateway(app: FastAPI, db: Database) -> Pool:
    """Serve ``/serve/`` in front of everything ``app`` has so far (call it after the
    other middleware); the connection pool is returned for whoever closes it."""
    pool = Pool()
    app.add_middleware(ServeGateway, endpoints=EndpointTable(db), pool=pool)
    return pool


class ServeGateway:
    """The ASGI middleware: ``/serve/`` requests here, everything else to ``app``."""

    def __init__(self, app: ASGIApp, endpoints: EndpointTable, pool: Pool) -> None:
        self.app = app
        self.endpoints = endpoints
        self.pool = pool

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        name, _, _ = scope["path"][len(PREFIX) :].partition("/")
        status = await self._serve(name, scope, receive, send)
        if status is not None:
            METER.record(name, status)

    async def _serve(self, name: str, scope: Scope, receive: Receive, send: Send) -> int | None:
        """Answer one request; the status answered for a service that exists (None else)."""
        if not _NAME_RE.fullmatch(name):
            await _refuse(scope, receive, send, 404, "not-found", f"there is no service named {name!r}")
            return None
        try:
            route = await self.endpoints.route(name)
        except DATABASE_ERRORS as exc:
            log.warning("could not read the services' endpoints: %s", exc)
            detail = "the database is unavailable; try again in a moment"
            await _refuse(scope, receive, send, 503, "unavailable", detail, retry=True)
            return None
        refusal = await _refusal(route, name, scope)
        if refusal is not None:
            status, slug, detail = refusal
            await _refuse(scope, receive, send, status, slug, detail, retry=status == 503)
            return None if route is None or status == 404 else status
        assert route is not None
        if scope["path"] == PREFIX + name:  # /serve/name: the service's root is /serve/name/
            location = f"{PREFIX}{name}/" + (
                f"?{scope['query_string'].decode()}" if scope["query_string"] else ""
            )
            headers = [(b"location", location.encode()), *CONFINED]
            await send({"type": "http.response.start", "status": 308, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return 308
        return await self._forward(route, scope, receive, send)

    async def _forward(self, route: ServiceRoute, scope: Scope, receive: Receive, send: Send) -> int:
        rotation = self.endpoints.rotation(route)
        if not rotation:
            reason = route.reason if await _may_read(route, scope) else _generic_reason(route.name)
            await _refuse(scope, receive, send, 503, "unavailable", reason, retry=True)
            return 503
        first = await receive()
        watch = CallerWatch(receive)
        try:
            return await self._forward_to(rotation, route, scope, first, watch, send)
        except asyncio.CancelledError:
            if not watch.left:
                raise
            watch.uncancel()
            return _CALLER_LEFT
        finally:
            watch.stop()

    async def _forward_to(
        self,
        rotation: list[Endpoint],
        route: ServiceRoute,
        scope: Scope,
        first: Message,
        watch: CallerWatch,
        send: Send,
    ) -> int:
        body = first.get("body", b"")
        streamed = first.get("more_body", False)
        method: str = scope["method"]
        replayable = method in _IDEMPOTENT and not streamed
        rest = _rest_of_body(watch.receive) if streamed else None
        if not streamed:
            watch.start()  # the request is in hand: what receive says next is the caller leaving
        for endpoint in rotation[:CONNECT_TRIES]:  # the next replica, others when it is gone
            try:
                answer = await self._exchange(
                    endpoint, route, scope, body, rest, watch, replayable=replayable
                )
            except ConnectFailed as exc:
                log.info(
                    "service %s: replica %s is unreachable (%s); trying another",
                    route.name,
                    endpoint.job_id,
                    exc,
                )
                self.endpoints.mark_down(endpoint)
                self.pool.forget((endpoint.host, endpoint.port))
                continue
            except UpstreamError as exc:
                log.info("service %s: replica %s failed to answer: %s", route.name, endpoint.job_id, exc)
                watch.stop()
                status, slug = _UNANSWERED[isinstance(exc, TooSlow)]
                which = f"replica {endpoint.job_id}" if await _may_read(route, scope) else "a replica"
                detail = f"{which} of service {route.name} failed to answer: {exc}"
                await _refuse(scope, watch.receive, send, status, slug, detail)
                return status
            await self._pass_answer(answer, send)
            return answer.status
        watch.stop()
        detail = f"no replica of service {route.name} could be reached; try again in a moment"
        await _refuse(scope, watch.receive, send, 503, "unavailable", detail, retry=True)
        return 503

    async def _exchange(
        self,
        endpoint: Endpoint,
        route: ServiceRoute,
        scope: Scope,
        body: bytes,
        rest: AsyncIterator[bytes] | None,
        watch: CallerWatch,
        *,
        replayable: bool,
    ) -> Answer:
        """Send the request to ``endpoint``: on a kept-alive connection, and again on a
        fresh one if that closed before answering and the request may be sent twice."""
        address = (endpoint.host, endpoint.port)
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        cut = raw_path.find(b"/", len(PREFIX))
        target = raw_path[cut:] if cut >= 0 else b"/"
        if scope["query_string"]:
            target += b"?" + scope["query_string"]
        prefix = PREFIX + route.name
        head, chunked = request_head(scope, target, prefix, address, body, streamed=rest is not None)
        fresh = False
        while True:
            conn = await self.pool.connection(address, fresh=fresh)
            try:
                await send_request(conn, head, body, rest, chunked=chunked)
                watch.start()
                return await read_answer(conn, scope["method"])
            except NoAnswer as exc:
                conn.close()
                if not (exc.reused and replayable):
                    raise
                fresh = True  # (a refused fresh connection then raises ConnectFailed)
            except BaseException:
                conn.close()
                raise

    async def _pass_answer(self, answer: Answer, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": answer.status,
                "headers": answer_headers(answer.headers),
            }
        )
        try:
            async for chunk in answer.body():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except (UpstreamError, OSError) as exc:
            answer.connection.close()
            log.warning("a replica's answer was cut short: %s", exc)
            raise  # the caller's connection is closed: a partial body must not look whole
        except BaseException:  # the caller left: the rest of the answer is nobody's
            answer.connection.close()
            raise
        if answer.reusable:
            self.pool.give_back(answer.connection)
        else:
            answer.connection.close()


async def _refusal(
    route: ServiceRoute | None, name: str, scope: Scope
) -> tuple[int, ProblemSlug, str] | None:
    """Why this caller may not call this service, or None if they may. Only a public
    service is known to exist before the caller's token is: anything else answers 401
    the same way to a caller without a valid one."""
    if route is not None and route.public:
        return None
    token = _bearer(scope)
    if token is None:
        return (
            401,
            "unauthorized",
            f"calling service {name!r} needs 'Authorization: Bearer <token>' with a token that has"
            " the 'serve' scope (only a public service needs none)",
        )
    try:
        principal, _ = await principal_of_bearer(HTTPConnection(scope), token)
    except Unauthorized as exc:
        return 401, "unauthorized", exc.detail
    except DATABASE_ERRORS as exc:
        log.warning("could not check a token for /serve/%s: %s", name, exc)
        return 503, "unavailable", "the database is unavailable; try again in a moment"
    if route is None or (principal.username != route.owner and not principal.is_admin):
        return 404, "not-found", f"there is no service named {name!r} (or it is not yours to call)"
    if "serve" not in principal.scopes:
        return (
            403,
            "forbidden",
            f"calling service {name} needs a token with the 'serve' scope"
            " (create one with POST /api/v1/tokens)",
        )
    return None


async def _may_read(route: ServiceRoute, scope: Scope) -> bool:
    """Whether the caller may read the service's status (its owner, an admin), and so be
    told about its replicas. Asked only when a request fails, never on the way to a replica."""
    if not route.public:
        return True  # (the caller is past _refusal: the owner or an admin)
    token = _bearer(scope)
    if token is None:
        return False
    try:
        principal, _ = await principal_of_bearer(HTTPConnection(scope), token)
    except Unauthorized:
        return False
    except DATABASE_ERRORS:
        return False
    return principal.username == route.owner or principal.is_admin


def _generic_reason(name: str) -> str:
    return f"no replica of service {name} is ready; try again in a moment"


class CallerWatch:
    """Cancels the request's task when its caller disconnects, from ``start`` (the
    request body is in hand, so ``receive`` has nothing else to say) to ``stop``.

    One small task per forwarded request, waiting on ``receive``. The cancellation lands
    where the request's task waits (on the replica, or on the caller's ``send``), and
    ``_forward`` turns it into an answer nobody reads; ``left`` tells that cancellation
    from any other, as ``asyncio.timeout`` tells its own.
    """

    __slots__ = ("_task", "_watcher", "left", "receive")

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.left = False
        self._task = asyncio.current_task()
        self._watcher: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch())

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()

    def uncancel(self) -> None:
        if self._task is not None:
            self._task.uncancel()

    async def _watch(self) -> None:
        message = await self.receive()
        if message["type"] == "http.disconnect" and self._task is not None:
            self.left = True
            self._task.cancel()


def _bearer(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() or None if scheme.lower() == "bearer" else None
    return None


async def _rest_of_body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise UpstreamError("the caller went away while sending its request body")
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


async def _refuse(
    scope: Scope,
    receive: Receive,
    send: Send,
    status: int,
    slug: ProblemSlug,
    detail: str,
    *,
    retry: bool = False,
) -> None:
    titles: dict[int, str] = {
        401: "Unauthorized",
        403: "Forbidden",
        404: "No such service",
        502: "The service's replica did not answer",
        503: "The service has no ready replica",
        504: "The service's replica did not answer in time",
    }
    response = problem(status, slug, titles[status], detail, scope["path"])
    response.raw_headers.extend(CONFINED)
    if retry:
        response.headers["retry-after"] = "1"
    await response(scope, receive, send)
