"""One HTTP request to a task's port, over a forward stream: HTTP/1.1 spoken with h11.

Each proxied request gets a stream of its own (as ``kubectl proxy`` opens a connection
per request through the API server), asks with ``Connection: close``, and ends when the
answer has been read to its end; no connection is pooled, so no request ever sees bytes
of another's. The request's body is sent before the answer is read (an app that answers
before reading its body still gets it whole), and the answer's body is streamed to the
client as it comes, so a long page or a download never sits in the API's memory.

What reaches the task is the client's request with Corral's own credentials taken out:
every cookie named ``corral_*`` (the portal's session and sign-in cookies) and, when the
caller signed in with it, the ``Authorization`` header (an app's own ``Authorization``,
sent beside the portal's cookie, goes through). Hop-by-hop headers are dropped, as RFC
9110 asks of a proxy; ``X-Forwarded-Prefix`` (the ``/proxy/…/<label>`` prefix),
``-Proto``, ``-Host`` and ``-For`` say where the client was. What comes back may not
set a ``corral_*`` cookie either: the task's page is served from the API's origin, so
whatever it answers is said for that whole origin. Hence nothing an app says may reach
beyond its own pages: no cookie named as Corral's (``corral_*``, or with the
``__Host-``/``__Secure-`` prefix before it) and none without a name (a browser would
read it as a cookie of any name), no ``Service-Worker-Allowed`` (a service worker
scoped over the whole API), no ``Clear-Site-Data`` (the portal's sign-in wiped) and no
``Strict-Transport-Security`` (the API's transport is its operator's choice).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import h11

from shared.errors import CorralError
from shared.interactive.protocol import DATA, ERROR, Channel
from shared.interactive.stream import StreamEnd

# RFC 9110 7.6.1: meaningful for one connection only, never forwarded.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
_FORWARDED = (
    b"x-forwarded-for",
    b"x-forwarded-host",
    b"x-forwarded-proto",
    b"x-forwarded-prefix",
    b"forwarded",
)
PORTAL_COOKIE_PREFIX = b"corral_"
# Set-Cookie names an app may not use: Corral's own, also behind a browser's name prefix.
_PORTAL_COOKIE_NAMES = (PORTAL_COOKIE_PREFIX, b"__host-corral", b"__secure-corral")
# What an app may not say for the API's whole origin (the module's docstring says why).
_ORIGIN_WIDE = frozenset({b"service-worker-allowed", b"clear-site-data", b"strict-transport-security"})
# A head larger than this is not an answer a proxy should hold in memory.
MAX_HEAD_BYTES = 64 * 1024

Headers = list[tuple[bytes, bytes]]


class NotHttp(CorralError):
    """The task's port answered with something that is not HTTP/1.1, or nothing."""

    problem_type = "node-refused"
    status = 502
    title = "The task's app did not answer with HTTP"


@dataclass(frozen=True)
class Where:
    """Where the client was: what the ``X-Forwarded-*`` headers say."""

    prefix: str
    proto: str
    host: str
    client: str


def _without_corral_cookies(value: bytes) -> bytes:
    kept = [
        part.strip()
        for part in value.split(b";")
        if part.strip() and not part.strip().lower().startswith(PORTAL_COOKIE_PREFIX)
    ]
    return b"; ".join(kept)


def request_headers(headers: Headers, port: int, where: Where, *, drop_authorization: bool) -> Headers:
    """The client's headers as the task's app gets them."""
    out: Headers = [(b"host", f"127.0.0.1:{port}".encode())]
    chunked = False
    for name, value in headers:
        name = name.lower()
        if name == b"transfer-encoding":
            chunked = True
        if name in HOP_BY_HOP or name in _FORWARDED or name == b"host":
            continue
        if name == b"authorization" and drop_authorization:
            continue
        if name == b"cookie":
            value = _without_corral_cookies(value)
            if not value:
                continue
        out.append((name, value))
    if chunked and not any(n == b"content-length" for n, _ in out):
        out.append((b"transfer-encoding", b"chunked"))
    out += [
        (b"connection", b"close"),
        (b"x-forwarded-prefix", where.prefix.encode()),
        (b"x-forwarded-proto", where.proto.encode()),
        (b"x-forwarded-host", where.host.encode()),
        (b"x-forwarded-for", where.client.encode()),
    ]
    return out


def _may_set(set_cookie: bytes) -> bool:
    """Whether an app's ``Set-Cookie`` may reach the browser: a named cookie not Corral's.
    A pair without ``=`` is a cookie with an empty name to a browser (RFC 6265bis 5.7)."""
    pair = set_cookie.split(b";", 1)[0]
    name, equals, _ = pair.partition(b"=")
    name = name.strip().lower()
    return bool(equals and name) and not name.startswith(_PORTAL_COOKIE_NAMES)


def response_headers(headers: Headers) -> Headers:
    """The app's headers as the client gets them: no hop-by-hop ones, none that speaks for
    the API's whole origin, no cookie that is Corral's or has no name."""
    out: Headers = []
    for name, value in headers:
        name = name.lower()
        if name in HOP_BY_HOP or name in _ORIGIN_WIDE:
            continue
        if name == b"set-cookie" and not _may_set(value):
            continue
        out.append((name, value))
    return out


class HttpOverStream:
    """One request and its answer over ``stream`` (a forward stream to the task's port)."""

    def __init__(self, stream: StreamEnd, what: str) -> None:
        self._stream = stream
        self._what = what  # "port 8888 (http) of task main-0", for errors
        self._conn = h11.Connection(our_role=h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self._ended = False
        self.bytes_in = 0
        self.bytes_out = 0

    async def send_request(
        self, method: str, target: bytes, headers: Headers, body: AsyncIterator[bytes]
    ) -> None:
        try:
            await self._stream.send(
                DATA, self._conn.send(h11.Request(method=method, target=target, headers=headers))
            )
            has_body = any(n in (b"content-length", b"transfer-encoding") for n, _ in headers)
            async for chunk in body:
                if chunk and has_body:
                    self.bytes_in += len(chunk)
                    await self._stream.send(DATA, self._conn.send(h11.Data(data=chunk)))
            end = self._conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:
            raise NotHttp(f"the request could not be passed on to {self._what}: {exc}") from None
        if end:
            await self._stream.send(DATA, end)

    async def response(self) -> tuple[int, Headers]:
        """The answer's status and headers (informational ones skipped)."""
        while True:
            event = await self._next()
            if isinstance(event, h11.Response):
                return event.status_code, list(event.headers)
            if not isinstance(event, h11.InformationalResponse):
                raise NotHttp(f"{self._what} closed the connection without answering")

    async def body(self) -> AsyncIterator[bytes]:
        """The answer's body, as it comes."""
        while True:
            event = await self._next()
            if isinstance(event, h11.Data):
                self.bytes_out += len(event.data)
                yield bytes(event.data)
            else:
                return  # EndOfMessage, or the app closed the connection

    async def _next(self) -> object:
        """The next h11 event (or the ``PAUSED`` sentinel), reading the stream as needed."""
        while True:
            try:
                event = self._conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise NotHttp(f"{self._what} did not answer with HTTP/1.1: {exc}") from None
            if event is not h11.NEED_DATA:
                return event
            if self._ended:
                raise NotHttp(f"{self._what} closed the connection in the middle of its answer")
            frame = await self._stream.receive()
            if frame is None or frame[0] == Channel.EOF:
                self._ended = True
                self._conn.receive_data(b"")
                continue
            channel, data = frame
            if channel == ERROR:
                raise NotHttp(f"{self._what}: {data.decode(errors='replace')}")
            if channel == DATA:
                self._conn.receive_data(data)
