"""NATS or Postgres restarted under a running stack: no job is lost, nothing runs twice.

Each test runs its own server (so it can stop and start it) beside the stack's usual
processes, all real.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from corral.local.nats import LocalNats
from corral.local.ports import free_port
from corral.local.postgres import LocalPostgres
from tests.e2e.stack import HOLD, Stack, submit, wait_state
from tests.infra import world_readable_tempdir

ENDS = {"SUCCEEDED", "FAILED", "CANCELLED"}


@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[LocalNats]:
    server = LocalNats(tmp_path / "nats", free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_postgres() -> Iterator[LocalPostgres]:
    directory = world_readable_tempdir("corral-restart-pg-")
    server = LocalPostgres(directory, free_port())
    server.start(log_file=directory / "postgres.log")
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def nats_stack(database_url: str, own_nats: LocalNats, tmp_path: Path) -> AsyncIterator[Stack]:
    env = {"CORRAL_DATABASE_URL": database_url, "CORRAL_NATS_URL": own_nats.url}
    async with Stack(tmp_path / "home", env).running() as stack:
        yield stack


@pytest.fixture
async def pg_stack(own_postgres: LocalPostgres, nats_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    env = {"CORRAL_DATABASE_URL": own_postgres.url(), "CORRAL_NATS_URL": nats_url}
    async with Stack(tmp_path / "home", env).running() as stack:
        yield stack


async def _attempts(database_url: str, job_id: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM launcher.attempts WHERE job_id = $1", job_id))
    finally:
        await conn.close()


async def test_nats_restarted_mid_job_loses_nothing(
    nats_stack: Stack, own_nats: LocalNats, database_url: str
) -> None:
    async with nats_stack.client() as http:
        running = await submit(http, HOLD)
        await wait_state(http, running, {"RUNNING"})
        own_nats.stop()
        nats_stack.release(running)  # the task ends while NATS is down
        queued = await submit(http, "echo submitted while NATS was down")  # the outbox holds it
        await asyncio.sleep(2)
        own_nats.start()  # same port, same JetStream store
        for job_id in (running, queued):
            job = await wait_state(http, job_id, ENDS, timeout_s=60)
            assert job["state"] == "SUCCEEDED", job
            assert await _attempts(database_url, job_id) == 1
        after = await submit(http, "echo after")
        assert (await wait_state(http, after, ENDS, timeout_s=30))["state"] == "SUCCEEDED"


async def test_postgres_restarted_mid_job_loses_nothing(pg_stack: Stack, own_postgres: LocalPostgres) -> None:
    async with pg_stack.client() as http:
        running = await submit(http, HOLD)
        await wait_state(http, running, {"RUNNING"})
        await asyncio.to_thread(own_postgres.stop)
        # While the database is down the API says so, retryably; it never answers 500.
        response = await http.post(
            "/api/v1/jobs",
            json={"name": "refused", "tasks": [{"name": "main", "command": "true"}]},
        )
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "2"
        assert "nothing was changed" in response.json()["detail"]
        pg_stack.release(running)  # the task ends while Postgres is down
        await asyncio.sleep(2)
        await asyncio.to_thread(own_postgres.start)
        job = await _wait_through_restarts(http, running)
        assert job["state"] == "SUCCEEDED", job
        assert len(job["attempts"]) == 1
        after = await submit(http, "echo after")
        assert (await _wait_through_restarts(http, after))["state"] == "SUCCEEDED"


async def _wait_through_restarts(http: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    """Poll a job while the API may still answer 503 (its pool reconnecting)."""
    for _ in range(600):
        response = await http.get(f"/api/v1/jobs/{job_id}")
        if response.status_code == 200 and response.json()["state"] in ENDS:
            job: dict[str, Any] = response.json()
            return job
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} did not end after the restart")
