"""``/serve/{name}/...``: requests reach a ready replica in turn, with Corral's credentials
and hop-by-hop headers taken out; who may call; 503 with the reason when none is ready;
a replica killed mid-traffic costs the caller nothing.

The API app runs in-process on a real database; the replicas are real processes
(serving_replicas.py) that answer what they received, linked to their service by rows
as the service controller and the launcher leave them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import httpx
import pytest

from services.api.app import create_app
from services.api.serving.traffic import requests_per_s
from services.api.settings import Settings
from services.api.tenants.auth import hash_token, upsert_token
from services.api.tenants.repository import TenantRepository
from shared.db.pool import Database
from shared.service import Health
from tests.api.serving_replicas import Replica, add_replica, add_service

ALICE, BOB, NO_SERVE = "crl_alice", "crl_bob", "crl_alice_no_serve"


@dataclass
class Gateway:
    http: httpx.AsyncClient  # no token
    db: Database

    async def call(self, path: str, token: str | None = ALICE, **kwargs: object) -> httpx.Response:
        headers = dict(kwargs.pop("headers", None) or {})  # type: ignore[call-overload]
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return await self.http.request(str(kwargs.pop("method", "GET")), path, headers=headers, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
async def gateway(db: Database, admin_token: str) -> AsyncIterator[Gateway]:
    tenants = TenantRepository(db)
    await upsert_token(tenants, "tok-alice", "alice", hash_token(ALICE), "user", "alice")
    await upsert_token(tenants, "tok-bob", "bob", hash_token(BOB), "user", "bob")
    await tenants.upsert_token("tok-alice-ns", "no serve", hash_token(NO_SERVE), "alice", "user", ["submit"])
    app = create_app(db, Health("api", {}), Settings())
    transport = httpx.ASGITransport(app=app, client=("10.1.2.3", 5000))
    async with httpx.AsyncClient(transport=transport, base_url="http://corral.test") as http:
        yield Gateway(http, db)
    app.state.serve_pool.close()


@pytest.fixture
async def replicas() -> AsyncIterator[Callable[[str], Awaitable[Replica]]]:
    started: list[Replica] = []

    async def start(name: str) -> Replica:
        replica = await Replica.start(name)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        await replica.kill()


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float = 3.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the gateway did not catch up with Postgres in time")


async def test_requests_go_to_each_ready_replica_in_turn_without_corrals_credentials(
    gateway: Gateway, replicas: Callable[[str], Awaitable[Replica]]
) -> None:
    await add_service(gateway.db, "echo")
    for name in ("a", "b"):
        await add_replica(gateway.db, "echo", (await replicas(name)).port)
    answers = [await gateway.call("/serve/echo/predict?x=1") for _ in range(6)]
    assert [a.status_code for a in answers] == [200] * 6
    assert sorted(a.json()["replica"] for a in answers) == ["a", "a", "a", "b", "b", "b"]
    assert answers[0].json()["replica"] != answers[1].json()["replica"]  # in turn, not at random
    got = await gateway.call(
        "/serve/echo/v1/models/m:predict",
        method="POST",
        content=b'{"instances": [1]}',
        headers={
            "Connection": "keep-alive, X-Hop",
            "X-Hop": "secret",
            "Keep-Alive": "timeout=5",
            "TE": "trailers",
            "X-Forwarded-For": "6.6.6.6",
            "Cookie": "corral_session=s3cret; theme=dark",
            "X-App": "kept",
        },
    )
    seen = got.json()
    headers = {k.lower(): v for k, v in seen["headers"]}
    assert (seen["method"], seen["target"], seen["body"]) == (
        "POST",
        "/v1/models/m:predict",
        '{"instances": [1]}',
    )
    for dropped in ("authorization", "x-hop", "keep-alive", "te"):
        assert dropped not in headers, dropped
    assert headers["x-app"] == "kept"
    assert headers["cookie"] == "theme=dark"
    assert headers["x-forwarded-for"] == "10.1.2.3"  # the caller's own claim is not passed on
    assert (headers["x-forwarded-prefix"], headers["x-forwarded-host"]) == ("/serve/echo", "corral.test")
    # What comes back may not set Corral's cookies on the API's origin.
    assert got.headers.get_list("set-cookie") == ["app=1; Path=/"]
    # A body of unknown length streams through, chunked.

    async def pieces() -> AsyncIterator[bytes]:
        for piece in (b"one ", b"two"):
            yield piece

    streamed = await gateway.call("/serve/echo/upload", method="PUT", content=pieces())
    assert (streamed.status_code, streamed.json()["body"]) == (200, "one two")
    # A chunked answer comes through whole, and its connection serves the next request.
    for _ in range(2):
        chunked = await gateway.call("/serve/echo/chunked")
        assert (chunked.status_code, chunked.text) == (200, "hello world")
    # The replica's own status comes through as it is.
    assert (await gateway.call("/serve/echo/status/418")).status_code == 418
    rate = requests_per_s("echo")
    assert rate is not None
    assert rate > 0
    metrics = (await gateway.http.get("/metrics")).text
    assert 'corral_serve_requests_total{code="418",service="echo"} 1.0' in metrics
    root = await gateway.call("/serve/echo", follow_redirects=False)
    assert (root.status_code, root.headers["location"]) == (308, "/serve/echo/")


async def test_who_may_call_a_service(
    gateway: Gateway, replicas: Callable[[str], Awaitable[Replica]]
) -> None:
    await add_service(gateway.db, "private")
    await add_service(gateway.db, "open", public=True)
    for service in ("private", "open"):
        await add_replica(gateway.db, service, (await replicas(service)).port)
    assert (await gateway.call("/serve/private/")).status_code == 200
    anonymous = await gateway.call("/serve/private/", token=None)
    assert anonymous.status_code == 401
    assert anonymous.headers["content-type"] == "application/problem+json"
    assert "serve" in anonymous.json()["detail"]
    assert (await gateway.call("/serve/private/", token="crl_nobody")).status_code == 401
    no_scope = await gateway.call("/serve/private/", token=NO_SERVE)
    assert no_scope.status_code == 403
    assert "'serve' scope" in no_scope.json()["detail"]
    # Another user's service is answered as one that does not exist, as a name never used is.
    hidden, unknown = await gateway.call("/serve/private/", token=BOB), await gateway.call("/serve/nope/")
    assert (hidden.status_code, unknown.status_code) == (404, 404)
    assert hidden.json()["detail"].replace("private", "nope") == unknown.json()["detail"]
    assert (await gateway.call("/serve/Bad..Name/")).status_code == 404
    # A public service needs no token; its replica never sees one.
    public = await gateway.call("/serve/open/x", token=None)
    assert public.status_code == 200
    assert (await gateway.call("/serve/open/x", token=BOB)).json()["replica"] == "open"
    assert "authorization" not in {k.lower() for k, _ in public.json()["headers"]}


async def test_no_ready_replica_is_a_503_that_says_why(
    gateway: Gateway, replicas: Callable[[str], Awaitable[Replica]]
) -> None:
    await add_service(gateway.db, "idle", replicas=0)
    idle = await gateway.call("/serve/idle/")
    assert (idle.status_code, idle.headers["retry-after"]) == (503, "1")
    assert "scaled to zero" in idle.json()["detail"]
    await add_service(gateway.db, "warming")
    job_id = await add_replica(
        gateway.db, "warming", (await replicas("w")).port, ready=False, detail="GET /healthz: 503"
    )

    async def known() -> bool:  # (a service made since the gateway's last read is not known yet)
        return (await gateway.call("/serve/warming/")).status_code != 404

    await until(known)
    warming = await gateway.call("/serve/warming/")
    assert warming.status_code == 503
    assert f"{job_id}: not ready: GET /healthz: 503" in warming.json()["detail"]
    # Ready once the probe passes: within the gateway's refresh, no restart.
    await gateway.db.execute("UPDATE launcher.attempts SET ready = true WHERE job_id = $1", job_id)

    async def answers() -> bool:
        return (await gateway.call("/serve/warming/")).status_code == 200

    await until(answers)


async def test_a_killed_replica_is_skipped_without_a_failed_request(
    gateway: Gateway, replicas: Callable[[str], Awaitable[Replica]]
) -> None:
    await add_service(gateway.db, "sturdy")
    doomed, survivor = await replicas("doomed"), await replicas("survivor")
    for replica in (doomed, survivor):
        await add_replica(gateway.db, "sturdy", replica.port)
    before = [await gateway.call("/serve/sturdy/") for _ in range(4)]
    assert {a.json()["replica"] for a in before} == {"doomed", "survivor"}  # both kept alive in the pool
    await doomed.kill()  # Postgres still says it is ready: only the gateway can notice
    after = [await gateway.call("/serve/sturdy/") for _ in range(10)]
    assert [a.status_code for a in after] == [200] * 10
    assert {a.json()["replica"] for a in after} == {"survivor"}
    posted = await gateway.call("/serve/sturdy/", method="POST", content=b"x")
    assert posted.status_code == 200
    await survivor.kill()
    none_left = await gateway.call("/serve/sturdy/")
    assert none_left.status_code == 503
    assert "could be reached" in none_left.json()["detail"]


async def test_two_replicas_killed_at_once_cost_no_request_its_answer(
    gateway: Gateway, replicas: Callable[[str], Awaitable[Replica]]
) -> None:
    await add_service(gateway.db, "triple")
    started = [await replicas(name) for name in ("one", "two", "three")]
    for replica in started:
        await add_replica(gateway.db, "triple", replica.port)
    assert {(await gateway.call("/serve/triple/")).json()["replica"] for _ in range(6)} == {
        "one",
        "two",
        "three",
    }
    for replica in started[:2]:
        await replica.kill()  # both still ready in Postgres: each request may meet both first
    after = [await gateway.call("/serve/triple/") for _ in range(9)]
    assert [a.status_code for a in after] == [200] * 9
    assert {a.json()["replica"] for a in after} == {"three"}
