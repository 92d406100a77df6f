"""HTTP/1.1 to a service's replicas over kept-alive connections: the gateway's client.

A minimal client on asyncio streams rather than h11 or httpx: the gateway's whole budget
per request is about a millisecond, and what it needs of HTTP/1.1 is small (write a
request head and body; read a status line, headers, and a body framed by
``Content-Length``, chunked or the connection's end), so parsing is a few ``bytes``
operations on lines the replica wrote. Headers pass through as bytes, unchanged apart
from what ``gateway.py`` takes out or adds.

Connections are pooled per replica address (``Pool``): a request takes an idle one (or
opens one), and gives it back once the answer was read to its end and neither side said
``Connection: close``. Any connection the replica might have closed meanwhile is a
*reused* one; an answer that never starts on it is ``NoAnswer`` with ``reused`` set, and
the gateway may try again on a fresh connection (the race every keep-alive client has:
a server may close an idle connection just as a request goes out).

A replica is trusted with nothing. Whatever it sends is held in memory a bounded piece
at a time (a head up to ``MAX_HEAD_BYTES``, a body in pieces of at most
``READ_CHUNK_BYTES`` whatever chunk size it announces), an answer that would not be
valid HTTP/1.1 once passed on (a status outside 100-599, a header name or value the
caller's server would refuse, two different lengths) is refused whole, and it cannot
hold the gateway by going quiet: ``ANSWER_TIMEOUT_S`` for the head of its answer,
``IDLE_TIMEOUT_S`` for each read of the body (and each wait for it to take the
request's). Both are read when used, so a test may shorten them.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

Headers = list[tuple[bytes, bytes]]

CONNECT_TIMEOUT_S = 2.0
# A response head larger than this is not one a gateway should hold in memory.
MAX_HEAD_BYTES = 64 * 1024
READ_CHUNK_BYTES = 64 * 1024
# Idle connections kept per replica, and for how long; a server closes its own idle
# connections after a while (uvicorn: 5 s), so one kept longer would mostly be stale.
MAX_IDLE_PER_REPLICA = 64
IDLE_S = 4.0
# How long a replica may take to start its answer (a model's whole inference may run
# before it does), and how long it may then go quiet in the middle of one.
ANSWER_TIMEOUT_S = 60.0
IDLE_TIMEOUT_S = 60.0

_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([1-5][0-9][0-9])(?: [^\x00-\x08\x0a-\x1f\x7f]*)?")
# RFC 9110 5.1 and 5.5: a token, a colon, a value of visible characters, spaces and tabs
# (obs-text allowed); anything else (a bare CR or LF, a folded line) makes the head invalid.
_HEADER_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([^\x00-\x08\x0a-\x1f\x7f]*?)[ \t]*")
# 16 hex digits are already 2^64 bytes; a longer size line is not one a replica means.
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_MAX_LENGTH_DIGITS = 18


class UpstreamError(Exception):
    """The replica could not be reached, or did not answer with HTTP/1.1."""


class ConnectFailed(UpstreamError):
    """No connection: nothing of the request was sent."""


class TooSlow(UpstreamError):
    """The replica did not answer, or went quiet in the middle of its answer, for longer
    than the gateway waits."""


class NoAnswer(UpstreamError):
    """The connection closed before the first byte of an answer."""

    def __init__(self, message: str, *, reused: bool) -> None:
        super().__init__(message)
        self.reused = reused


@dataclass(eq=False)
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    address: tuple[str, int]
    reused: bool = False
    idle_since: float = field(default_factory=time.monotonic)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


@dataclass
class Answer:
    """A replica's status and headers; ``body()`` yields its body, after which
    ``reusable`` says whether the connection may take another request."""

    status: int
    headers: Headers
    connection: Connection
    length: int | None  # Content-Length; None: chunked or to the end
    chunked: bool
    keep_alive: bool
    reusable: bool = False

    async def body(self) -> AsyncIterator[bytes]:
        reader = self.connection.reader
        if self.chunked:
            async for chunk in _chunks(reader):
                yield chunk
        elif self.length is not None:
            async for chunk in _counted(reader, self.length):
                yield chunk
        else:
            while chunk := await _in_time(reader.read(READ_CHUNK_BYTES)):
                yield chunk
            return  # read to the connection's end: it cannot be reused
        self.reusable = self.keep_alive


async def _counted(reader: asyncio.StreamReader, length: int) -> AsyncIterator[bytes]:
    """``length`` bytes, in pieces of at most ``READ_CHUNK_BYTES``."""
    left = length
    while left > 0:
        chunk = await _in_time(reader.read(min(left, READ_CHUNK_BYTES)))
        if not chunk:
            raise UpstreamError("the replica closed the connection in the middle of its answer")
        left -= len(chunk)
        yield chunk


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """A chunked body's data, each chunk passed on in pieces as it comes: the size a
    replica announces is never read in one go."""
    try:
        while True:
            line = await _in_time(reader.readuntil(b"\r\n"))
            digits = line[:-2].split(b";", 1)[0].strip()
            if not _CHUNK_SIZE.fullmatch(digits):
                raise UpstreamError(f"the replica's chunk size is not 1 to 16 hex digits: {digits[:40]!r}")
            size = int(digits, 16)
            if size == 0:
                trailers = 0
                while (line := await _in_time(reader.readuntil(b"\r\n"))) != b"\r\n":
                    trailers += len(line)  # trailers: not passed on, nor read without end
                    if trailers > MAX_HEAD_BYTES:
                        raise UpstreamError(f"the replica's trailers are over {MAX_HEAD_BYTES} bytes")
                return
            async for piece in _counted(reader, size):
                yield piece
            if await _in_time(reader.readexactly(2)) != b"\r\n":
                raise UpstreamError("the replica's chunk is longer than its size says")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        raise UpstreamError(f"the replica's chunked answer is malformed or cut short: {exc}") from None


async def _in_time(step: Awaitable[T]) -> T:
    """One read of an answer's body (or one wait for the replica to take more of the
    request), given up after ``IDLE_TIMEOUT_S``."""
    try:
        async with asyncio.timeout(IDLE_TIMEOUT_S):
            return await step
    except TimeoutError:
        raise TooSlow(f"the replica went quiet for {IDLE_TIMEOUT_S:g} s in mid-exchange") from None


class Pool:
    """Idle connections per replica address (``host``, ``port``)."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[Connection]] = {}

    async def connection(self, address: tuple[str, int], *, fresh: bool = False) -> Connection:
        """An idle connection to ``address`` (unless ``fresh``), else a new one."""
        idle = self._idle.get(address)
        now = time.monotonic()
        while idle and not fresh:
            conn = idle.pop()
            if now - conn.idle_since < IDLE_S and not conn.reader.at_eof():
                conn.reused = True
                return conn
            conn.close()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(*address, limit=MAX_HEAD_BYTES), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"could not connect to {address[0]}:{address[1]}: {exc}") from None
        return Connection(reader, writer, address)

    def give_back(self, conn: Connection) -> None:
        idle = self._idle.setdefault(conn.address, [])
        if len(idle) >= MAX_IDLE_PER_REPLICA:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    def forget(self, address: tuple[str, int]) -> None:
        """Close every idle connection to a replica known to be gone."""
        for conn in self._idle.pop(address, []):
            conn.close()

    def close(self) -> None:
        for address in list(self._idle):
            self.forget(address)


async def send_request(
    conn: Connection, head: bytes, first: bytes, rest: AsyncIterator[bytes] | None, *, chunked: bool
) -> None:
    """Write the request: ``head`` (ending in the blank line), then the body: its
    ``first`` bytes and, when it is streamed, the ``rest`` as it comes; ``chunked``
    (``head`` says ``Transfer-Encoding: chunked``) frames each piece as a chunk."""
    writer = conn.writer
    try:
        writer.write(head)
        if rest is None:
            _write_body(writer, first, chunked)
        else:
            _write_body(writer, first, chunked, last=False)
            async for chunk in rest:
                _write_body(writer, chunk, chunked, last=False)
                await _in_time(writer.drain())
            _write_body(writer, b"", chunked)
        await _in_time(writer.drain())
    except OSError as exc:
        raise NoAnswer(f"the replica closed the connection: {exc}", reused=conn.reused) from None


def _write_body(writer: asyncio.StreamWriter, data: bytes, chunked: bool, *, last: bool = True) -> None:
    if not chunked:
        if data:
            writer.write(data)
        return
    if data:
        writer.write(b"%x\r\n%b\r\n" % (len(data), data))
    if last:
        writer.write(b"0\r\n\r\n")


async def read_answer(conn: Connection, method: str) -> Answer:
    """The answer's status and headers (informational answers skipped), within
    ``ANSWER_TIMEOUT_S``."""
    try:
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            return await _final_head(conn, method)
    except TimeoutError:
        raise TooSlow(f"the replica did not answer within {ANSWER_TIMEOUT_S:g} s") from None


async def _final_head(conn: Connection, method: str) -> Answer:
    while True:
        try:
            head = await conn.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise NoAnswer(
                    "the replica closed the connection without answering", reused=conn.reused
                ) from None
            raise UpstreamError("the replica closed the connection in the middle of its answer") from None
        except asyncio.LimitOverrunError:
            raise UpstreamError(f"the replica's answer head is over {MAX_HEAD_BYTES} bytes") from None
        except OSError as exc:
            raise NoAnswer(f"the replica reset the connection: {exc}", reused=conn.reused) from None
        answer = _parse_head(head, conn, method)
        if not 100 <= answer.status < 200:
            return answer
        if answer.status == 101:
            raise UpstreamError("the replica switched protocols; /serve/ passes HTTP/1.1 requests only")


def _parse_head(head: bytes, conn: Connection, method: str) -> Answer:
    """The answer's head, checked: what the gateway passes on must be valid HTTP/1.1."""
    lines = head[:-4].split(b"\r\n")
    status_line = _STATUS_LINE.fullmatch(lines[0])
    if status_line is None:
        raise UpstreamError(f"the replica's status line is not valid HTTP/1.1: {lines[0][:80]!r}")
    status = int(status_line[2])
    keep_alive = status_line[1] == b"1"
    headers: Headers = []
    length: int | None = None
    transfer_coding: bytes | None = None
    for line in lines[1:]:
        header = _HEADER_LINE.fullmatch(line)
        if header is None:
            raise UpstreamError(f"the replica's answer has a malformed header line: {line[:80]!r}")
        name, value = header[1].lower(), header[2]
        if name == b"content-length":
            if not value.isdigit() or len(value) > _MAX_LENGTH_DIGITS:
                raise UpstreamError(f"the replica's Content-Length is not a number: {value[:40]!r}")
            if length is not None:
                if int(value) != length:
                    raise UpstreamError("the replica's answer has two different Content-Length headers")
                continue  # the same length twice: passed on once
            length = int(value)
        elif name == b"transfer-encoding":
            transfer_coding = value.lower().rsplit(b",", 1)[-1].strip()
        elif name == b"connection":
            tokens = {t.strip() for t in value.lower().split(b",")}
            keep_alive = b"close" not in tokens and (keep_alive or b"keep-alive" in tokens)
        headers.append((name, value))
    chunked = transfer_coding == b"chunked"
    if transfer_coding is not None:
        # RFC 9112 6.3: Transfer-Encoding overrides Content-Length (to the end when the last
        # coding is not chunked), and a length passed on beside a body framed otherwise
        # would tell the caller a different body than it gets.
        length = None
        headers = [h for h in headers if h[0] != b"content-length"]
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        length, chunked = 0, False
    return Answer(status, headers, conn, length, chunked, keep_alive)
