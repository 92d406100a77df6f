"""``Idempotency-Key`` on submit and per-token rate limits, over HTTP on a real database:
a replay returns the first job (also concurrently, also as YAML), another body with the
same key is a 422 that changes nothing, keys are per user and expire; an empty bucket
is a 429 problem with ``Retry-After`` that reaches no route."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from services.api.app import create_app
from services.api.rate_limit import Buckets
from services.api.settings import ApiSettings, Settings
from services.api.tenants.auth import hash_token, upsert_token
from services.api.tenants.repository import TenantRepository
from shared.db.pool import Database
from shared.service import Health

HELLO: dict[str, Any] = {"name": "hello", "tasks": [{"name": "main", "command": "echo hello"}]}


async def _jobs(db: Database) -> int:
    return int(await db.fetchval("SELECT count(*) FROM api.jobs"))


async def test_a_replay_with_the_same_key_returns_the_first_job(
    client: httpx.AsyncClient, db: Database
) -> None:
    key = {"Idempotency-Key": "3b8f1c1e-retry"}
    first = await client.post("/api/v1/jobs", json=HELLO, headers=key)
    assert first.status_code == 201
    assert "Idempotent-Replayed" not in first.headers
    again = await client.post("/api/v1/jobs", json=HELLO, headers=key)
    assert again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    # The same document as YAML, with other whitespace, is the same request.
    as_yaml = "name: hello\ntasks:\n- {name: main,   command: echo hello}\n"
    replay = await client.post(
        "/api/v1/jobs", content=as_yaml, headers={**key, "content-type": "application/yaml"}
    )
    assert replay.json()["id"] == first.json()["id"]
    assert await _jobs(db) == 1
    assert await db.fetchval("SELECT count(*) FROM corral.outbox") == 1


async def test_the_same_key_with_another_body_is_a_422_that_changes_nothing(
    client: httpx.AsyncClient, db: Database
) -> None:
    key = {"Idempotency-Key": "k1"}
    first = await client.post("/api/v1/jobs", json=HELLO, headers=key)
    other = await client.post("/api/v1/jobs", json={**HELLO, "priority": 5}, headers=key)
    assert other.status_code == 422
    problem = other.json()
    assert problem["type"].endswith("/idempotency-key-reused")
    assert first.json()["id"] in problem["detail"]
    assert "new key" in problem["detail"]
    assert await _jobs(db) == 1


async def test_concurrent_replays_create_one_job(client: httpx.AsyncClient, db: Database) -> None:
    key = {"Idempotency-Key": "burst"}
    answers = await asyncio.gather(*(client.post("/api/v1/jobs", json=HELLO, headers=key) for _ in range(8)))
    assert {a.status_code for a in answers} == {201}
    assert len({a.json()["id"] for a in answers}) == 1
    assert await _jobs(db) == 1


async def test_keys_are_per_user_and_expire(client: httpx.AsyncClient, db: Database) -> None:
    await upsert_token(TenantRepository(db), "tok-alice", "alice", hash_token("crl_alice"), "user", "alice")
    key = {"Idempotency-Key": "same"}
    mine = (await client.post("/api/v1/jobs", json=HELLO, headers=key)).json()["id"]
    theirs = await client.post(
        "/api/v1/jobs", json=HELLO, headers={**key, "Authorization": "Bearer crl_alice"}
    )
    assert theirs.status_code == 201
    assert theirs.json()["id"] != mine
    # A day later the key is free again: the old row is taken over.
    await db.execute("UPDATE api.idempotency_keys SET created_at = now() - interval '25 hours'")
    later = await client.post("/api/v1/jobs", json={**HELLO, "priority": 1}, headers=key)
    assert later.status_code == 201
    assert later.json()["id"] != mine
    assert await _jobs(db) == 3


async def test_a_refused_submit_leaves_its_key_unused(client: httpx.AsyncClient, db: Database) -> None:
    key = {"Idempotency-Key": "retry-me"}
    refused = await client.post("/api/v1/jobs", json={**HELLO, "virtual_cluster": "nope"}, headers=key)
    assert refused.status_code == 422
    assert await db.fetchval("SELECT count(*) FROM api.idempotency_keys") == 0
    assert (await client.post("/api/v1/jobs", json=HELLO, headers=key)).status_code == 201


@pytest.mark.parametrize("key", ["", "has space", "x" * 256, "tab\there", "é"])
async def test_a_malformed_key_is_a_422(client: httpx.AsyncClient, db: Database, key: str) -> None:
    headers = {b"Idempotency-Key": key.encode(), b"content-type": b"application/json"}
    response = await client.post("/api/v1/jobs", content=json.dumps(HELLO).encode(), headers=headers)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert await _jobs(db) == 0


@pytest.fixture
async def limited(db: Database, admin_token: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        api=ApiSettings(
            rate_limit_per_s=1.0, rate_limit_burst=5, submit_rate_limit_per_s=0.5, submit_rate_limit_burst=2
        )
    )
    app = create_app(db, Health("api", {}), settings)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://corral.test",
        headers={"Authorization": f"Bearer {admin_token}"},
    ) as http:
        yield http


async def test_a_token_over_its_submit_limit_gets_429_with_retry_after(
    limited: httpx.AsyncClient, db: Database
) -> None:
    statuses = [(await limited.post("/api/v1/jobs", json=HELLO)).status_code for _ in range(3)]
    assert statuses == [201, 201, 429]
    refused = await limited.post("/api/v1/jobs", json=HELLO)
    assert refused.status_code == 429
    assert refused.headers["content-type"] == "application/problem+json"
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["type"].endswith("/rate-limited")
    assert "submits per second" in refused.json()["detail"]
    assert await _jobs(db) == 2  # the refused ones reached no route
    # Reads draw from the general bucket (5 in a burst; four spent on submits above).
    assert (await limited.get("/api/v1/jobs")).status_code == 200
    read_refused = await limited.get("/api/v1/jobs")
    assert read_refused.status_code == 429
    assert "requests per second" in read_refused.json()["detail"]
    # Another token has a bucket of its own; health checks are never limited.
    assert (await limited.get("/healthz")).status_code == 200
    other = await limited.get("/api/v1/jobs", headers={"Authorization": "Bearer someone-else"})
    assert other.status_code == 401


def test_a_bucket_refills_at_its_rate_and_says_how_long_to_wait() -> None:
    now = [0.0]
    buckets = Buckets(rate=2.0, burst=3, clock=lambda: now[0])
    assert [buckets.take("t") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("t") == pytest.approx(0.5)
    now[0] += 0.5
    assert buckets.take("t") == 0.0
    assert buckets.take("other") == 0.0  # per caller
    assert Buckets(rate=0, burst=1).take("t") == 0.0  # 0: no limit
