"""``/serve/`` against replicas that misbehave, and callers who may not know what they ask.

A replica is any program a user runs, so the gateway trusts nothing it sends: a chunk
size of terabytes is passed on in small pieces, never held; a replica that never answers
is a 504 within the answer timeout, one that goes quiet in the middle of a body is cut
off; a caller that leaves ends the exchange and the replica's connection; a status line
or header the caller's server would refuse, or two framings of one body, is a 502
problem. Every answer, refusals included, is sandboxed in an opaque origin. Without a
valid token a private service and a missing one look the same; a public service's 503
tells its job ids only to whoever may read the service.

The replicas here are raw asyncio servers in the test (``Hostile``), each doing what the
test says once it has read a request head; the API app runs in-process on a real
database, called through httpx or, where the caller must leave in the middle, as an
ASGI app directly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import REGISTRY

from services.api.app import create_app
from services.api.serving import upstream
from services.api.serving.upstream import READ_CHUNK_BYTES, TooSlow, UpstreamError
from services.api.settings import Settings
from services.api.tenants.auth import hash_token, upsert_token
from services.api.tenants.repository import TenantRepository
from shared.db.pool import Database
from shared.service import Health
from tests.api.serving_replicas import add_replica, add_service

ALICE, BOB = "crl_alice", "crl_bob"
SANDBOX = "sandbox allow-scripts allow-forms allow-popups allow-downloads"
Behaviour = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Hostile:
    """A replica that reads a request head, then does ``behaviour``; ``closed`` is set
    when the gateway closes a connection to it."""

    behaviour: Behaviour
    port: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    _server: asyncio.Server | None = None
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    async def start(self) -> Hostile:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        try:
            while True:  # one request after another on a kept-alive connection
                await reader.readuntil(b"\r\n\r\n")
                await self.behaviour(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed.set()
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:  # each handler then reads the end of its connection
            writer.close()
        await asyncio.wait_for(asyncio.gather(*self._handlers, return_exceptions=True), 2)
        await self._server.wait_closed()


async def never_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()  # until the gateway closes the connection
    raise ConnectionResetError


async def endless_huge_chunk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A chunk of 17.6 TB announced, and data without end."""
    writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nfffffffffff\r\n")
    while not reader.at_eof():
        writer.write(bytes(256 * 1024))
        await writer.drain()
        await asyncio.sleep(0)
    raise ConnectionResetError


def answering(raw: bytes) -> Behaviour:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(raw)
        await writer.drain()

    return answer


def then_stalls(raw: bytes) -> Behaviour:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(raw)
        await writer.drain()
        await never_answers(reader, writer)

    return answer


@dataclass
class Stand:
    app: FastAPI
    http: httpx.AsyncClient
    db: Database
    replicas: list[Hostile]

    async def replica(self, behaviour: Behaviour, service: str, *, public: bool = False) -> Hostile:
        replica = await Hostile(behaviour).start()
        self.replicas.append(replica)
        await add_service(self.db, service, public=public)
        await add_replica(self.db, service, replica.port)
        return replica

    async def call(self, path: str, token: str | None = ALICE) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return await self.http.get(path, headers=headers)

    async def leave(
        self, path: str, enough: Callable[[list[bytes]], bool] | None = None
    ) -> tuple[float, list[bytes]]:
        """Call ``path`` as a caller that disconnects once ``enough`` of the body came
        (without ``enough``: 0.2 s after its request): the seconds from leaving until the
        gateway was done, and the body pieces it sent."""
        left = asyncio.Event()
        pieces: list[bytes] = []
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"corral.test"), (b"authorization", f"Bearer {ALICE}".encode())],
            "client": ("10.1.2.3", 5000),
            "server": ("corral.test", 80),
        }
        requested = False
        left_at = 0.0

        async def receive() -> dict[str, Any]:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": b"", "more_body": False}
            if enough is None:
                await asyncio.sleep(0.2)
                left.set()
            await left.wait()
            nonlocal left_at
            left_at = time.monotonic()
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                pieces.append(message["body"])
            if enough is not None and enough(pieces):
                left.set()

        await asyncio.wait_for(self.app(scope, receive, send), 5)
        return time.monotonic() - left_at, pieces


@pytest.fixture
async def stand(db: Database, admin_token: str) -> AsyncIterator[Stand]:
    tenants = TenantRepository(db)
    await upsert_token(tenants, "tok-alice", "alice", hash_token(ALICE), "user", "alice")
    await upsert_token(tenants, "tok-bob", "bob", hash_token(BOB), "user", "bob")
    app = create_app(db, Health("api", {}), Settings())
    transport = httpx.ASGITransport(app=app, client=("10.1.2.3", 5000))
    replicas: list[Hostile] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://corral.test") as http:
        yield Stand(app, http, db, replicas)
    app.state.serve_pool.close()
    for replica in replicas:
        await replica.stop()


def served(name: str, code: int) -> float:
    return REGISTRY.get_sample_value("corral_serve_requests_total", {"service": name, "code": f"{code}"}) or 0


async def test_a_huge_chunk_passes_in_small_pieces_and_ends_when_the_caller_leaves(stand: Stand) -> None:
    replica = await stand.replica(endless_huge_chunk, "huge")
    seconds, pieces = await stand.leave("/serve/huge/", lambda got: sum(map(len, got)) >= 4 << 20)
    # Streamed as it came, in pieces no larger than the gateway reads, never held whole.
    assert sum(map(len, pieces)) >= 4 << 20
    assert max(map(len, pieces)) <= READ_CHUNK_BYTES
    assert seconds < 2
    await asyncio.wait_for(replica.closed.wait(), 1)  # the gateway let go of the replica
    assert served("huge", 499) == 1


async def test_a_caller_leaving_ends_the_wait_for_a_replica_that_never_answers(stand: Stand) -> None:
    replica = await stand.replica(never_answers, "mute")
    seconds, pieces = await stand.leave("/serve/mute/")
    assert (pieces, seconds < 1) == ([], True)  # not the 60 s answer timeout
    await asyncio.wait_for(replica.closed.wait(), 1)


async def test_a_replica_too_slow_to_answer_is_a_504_and_one_quiet_mid_body_is_cut_off(
    stand: Stand, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upstream, "ANSWER_TIMEOUT_S", 0.3)
    monkeypatch.setattr(upstream, "IDLE_TIMEOUT_S", 0.3)
    mute = await stand.replica(never_answers, "mute")
    ten_of_100 = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789"
    stalled = await stand.replica(then_stalls(ten_of_100), "stall")
    started = time.monotonic()
    late = await stand.call("/serve/mute/")
    assert late.status_code == 504
    assert time.monotonic() - started < 1.5
    assert "did not answer within 0.3 s" in late.json()["detail"]
    await asyncio.wait_for(mute.closed.wait(), 1)
    with pytest.raises(TooSlow):  # the caller's connection is closed: a partial body must not look whole
        await stand.call("/serve/stall/")
    await asyncio.wait_for(stalled.closed.wait(), 1)


async def test_an_answer_that_is_not_valid_http_is_a_502_problem(stand: Stand) -> None:
    answers = {
        b"status 0": b"HTTP/1.1 0 Zero\r\ncontent-length: 0\r\n\r\n",
        b"status 99999": b"HTTP/1.1 99999 Huge\r\ncontent-length: 0\r\n\r\n",
        b"bare LF": b"HTTP/1.1 200 OK\r\nx-a: 1\nset-cookie: corral_session=x\r\ncontent-length: 0\r\n\r\n",
        b"header name": b"HTTP/1.1 200 OK\r\nbad name: 1\r\ncontent-length: 0\r\n\r\n",
        b"folded header": b"HTTP/1.1 200 OK\r\nx-a: 1\r\n folded\r\ncontent-length: 0\r\n\r\n",
        b"control character": b"HTTP/1.1 200 OK\r\nx-a: 1\x00\r\ncontent-length: 0\r\n\r\n",
        b"two lengths": b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nabc",
        b"a length of 5000 digits": b"HTTP/1.1 200 OK\r\ncontent-length: " + b"9" * 5000 + b"\r\n\r\n",
    }
    now: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(answers[now[-1]])
        await writer.drain()

    await stand.replica(answer, "odd", public=True)
    for case in answers:
        now.append(case)
        refused = await stand.call("/serve/odd/", token=None)
        assert refused.status_code == 502, case
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.headers["content-security-policy"] == SANDBOX
        assert "replica job-" not in refused.json()["detail"]  # not to an anonymous caller
    owner = await stand.call("/serve/odd/")
    assert (owner.status_code, "replica job-" in owner.json()["detail"]) == (502, True)


async def test_a_chunked_body_with_a_length_is_passed_on_chunked_and_a_bad_chunk_size_cuts_it(
    stand: Stand,
) -> None:
    both = (
        b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    )
    await stand.replica(answering(both), "both")
    too_long = b"0" * 16 + b"1"  # 17 hex digits: no replica means that
    long_chunk = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n%b\r\nx\r\n0\r\n\r\n" % too_long
    await stand.replica(answering(long_chunk), "long")
    for _ in range(2):  # framed by its chunks, so the connection serves the next request
        got = await stand.call("/serve/both/")
        assert (got.status_code, got.text, got.headers.get("content-length")) == (200, "hello", None)
    with pytest.raises(UpstreamError, match="1 to 16 hex digits"):
        await stand.call("/serve/long/")


async def test_every_serve_answer_is_sandboxed_in_an_opaque_origin(stand: Stand) -> None:
    page = b"<script>fetch('/api/v1/whoami')</script>"
    await stand.replica(
        answering(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-security-policy: default-src 'self'\r\n"
            b"x-content-type-options: sniff-away\r\ncontent-length: %d\r\n\r\n%b" % (len(page), page)
        ),
        "site",
        public=True,
    )
    got = await stand.call("/serve/site/", token=None)
    assert got.status_code == 200
    policies = got.headers.get_list("content-security-policy")
    assert sorted(policies) == sorted(["default-src 'self'", SANDBOX])  # the replica's own is kept beside
    assert all("allow-same-origin" not in p for p in policies)
    assert got.headers.get_list("x-content-type-options") == ["nosniff"]
    # The gateway's own answers too: a redirect, a refusal, an unknown name.
    for path, token, status in (
        ("/serve/site", None, 308),
        ("/serve/nope/", None, 401),
        ("/serve/Bad..Name/", ALICE, 404),
    ):
        answer = await stand.http.get(
            path, headers={"Authorization": f"Bearer {token}"} if token else {}, follow_redirects=False
        )
        assert answer.status_code == status
        assert (answer.headers["content-security-policy"], answer.headers["x-content-type-options"]) == (
            SANDBOX,
            "nosniff",
        )


async def test_without_a_valid_token_a_private_service_and_a_missing_one_look_the_same(stand: Stand) -> None:
    await stand.replica(answering(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"), "secret")
    for token in (None, "crl_nobody"):
        private, missing = (
            await stand.call("/serve/secret/", token),
            await stand.call("/serve/absent/", token),
        )
        assert (private.status_code, missing.status_code) == (401, 401), token
        assert private.json()["detail"].replace("secret", "absent") == missing.json()["detail"]
    # With a valid token, what is not the caller's is not found, as what does not exist.
    private, missing = await stand.call("/serve/secret/", BOB), await stand.call("/serve/absent/", BOB)
    assert (private.status_code, missing.status_code) == (404, 404)
    assert (await stand.call("/serve/secret/")).status_code == 200


async def test_a_public_services_503_says_why_only_to_whoever_may_read_it(stand: Stand) -> None:
    await add_service(stand.db, "shop", public=True)
    job_id = await add_replica(stand.db, "shop", 1, ready=False, detail="GET /healthz: 500 (db down)")
    generic = "no replica of service shop is ready; try again in a moment"
    for token in (None, BOB, "crl_nobody"):
        outsider = await stand.call("/serve/shop/", token)
        assert (outsider.status_code, outsider.json()["detail"]) == (503, generic), token
    owner = await stand.call("/serve/shop/")
    assert owner.status_code == 503
    assert f"{job_id}: not ready: GET /healthz: 500 (db down)" in owner.json()["detail"]


async def test_a_database_down_while_checking_a_token_is_a_503_problem(stand: Stand) -> None:
    await stand.replica(answering(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"), "guarded")
    assert (await stand.call("/serve/guarded/")).status_code == 200  # the route table is read
    await stand.db.execute("ALTER TABLE api.tokens RENAME TO tokens_away")
    try:
        refused = await stand.call("/serve/guarded/", BOB)  # not in the token cache yet
    finally:
        await stand.db.execute("ALTER TABLE api.tokens_away RENAME TO tokens")
    assert (refused.status_code, refused.headers["retry-after"]) == (503, "1")
    assert refused.headers["content-type"] == "application/problem+json"
    assert "database is unavailable" in refused.json()["detail"]
