"""A service replica never ends on its own: every end but a cancel puts its job back in
the queue, with a delay that doubles per crash up to ``retry.max_backoff_s``, starts over
after a healthy run, and a reason that says what ended it and when it starts again (the
launcher's decision, on a real Postgres)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.launcher.outcomes import evaluate_job
from shared.db.pool import Database
from shared.events import JobRetrying, parse_event
from tests.e2e.stack import Stack, wait_state
from tests.launcher.service_crashes import crash, service_job


async def _job(db: Database, job_id: str) -> tuple[str, int, float, str]:
    row = await db.fetchrow(
        "SELECT state, retries, extract(epoch FROM not_before - updated_at)::float8 AS wait_s, reason"
        " FROM api.jobs WHERE id = $1",
        job_id,
    )
    assert row is not None
    return row["state"], row["retries"], round(row["wait_s"] or 0.0, 1), row["reason"]


async def test_a_crashing_replica_restarts_with_a_growing_delay_and_never_fails(db: Database) -> None:
    job_id = await service_job(db, backoff_s=1.0, max_backoff_s=4.0)  # max_retries 0: a batch job would fail
    assert await crash(db, job_id) == "PENDING"
    assert await _job(db, job_id) == (
        "PENDING",
        1,
        1.0,
        "restarting: task main-0 exited with code 1; next start in 1 s",
    )
    waits = []
    for _ in range(4):
        assert await crash(db, job_id) == "PENDING"
        waits.append((await _job(db, job_id))[1:3])
    assert waits == [(2, 2.0), (3, 4.0), (4, 4.0), (5, 4.0)]  # doubling, capped at max_backoff_s
    assert (await _job(db, job_id))[3] == (
        "restarting: task main-0 exited with code 1 (5 crashes in a row); next start in 4 s"
    )
    retrying = await db.fetch(
        "SELECT payload FROM corral.outbox WHERE aggregate = $1 AND subject LIKE '%retrying%' ORDER BY id",
        job_id,
    )
    assert len(retrying) == 5
    last = parse_event(bytes(retrying[-1]["payload"]))
    assert isinstance(last, JobRetrying)
    assert last.data.retries == 5
    assert "5 crashes in a row" in last.data.reason


async def test_a_healthy_run_starts_the_delay_over(db: Database) -> None:
    job_id = await service_job(db, backoff_s=1.0, max_backoff_s=60.0)
    for _ in range(3):
        await crash(db, job_id)
    assert (await _job(db, job_id))[1:3] == (3, 4.0)
    await crash(db, job_id, ran_s=15.0)  # ten first delays: it was serving
    assert (await _job(db, job_id))[1:3] == (1, 1.0)


@pytest.mark.parametrize("exit_code", [0, 2, 137])
async def test_any_end_restarts_even_a_clean_or_permanent_one(db: Database, exit_code: int) -> None:
    job_id = await service_job(db, backoff_s=0.5)
    assert await crash(db, job_id, exit_code=exit_code) == "PENDING"
    state, retries, wait_s, reason = await _job(db, job_id)
    assert (state, retries, wait_s) == ("PENDING", 1, 0.5)
    assert f"exited with code {exit_code}" in reason


async def test_a_lost_node_is_no_crash_of_the_replica(db: Database) -> None:
    job_id = await service_job(db, backoff_s=1.0, max_backoff_s=60.0)
    for _ in range(2):
        await crash(db, job_id)
    assert await crash(db, job_id, classification="transient") == "PENDING"
    assert (await _job(db, job_id))[1:3] == (2, 1.0)  # not counted, the first delay


async def test_a_cancel_ends_it(db: Database) -> None:
    job_id = await service_job(db)
    await db.execute("UPDATE api.jobs SET cancel_requested_at = now() WHERE id = $1", job_id)
    assert await crash(db, job_id) == "CANCELLED"
    assert (await _job(db, job_id))[0] == "CANCELLED"


async def test_a_batch_job_still_fails_as_before(db: Database) -> None:
    job_id = await service_job(db)
    await db.execute(
        "UPDATE api.jobs SET spec = spec - 'service' || '{\"kind\": \"batch\"}' WHERE id = $1", job_id
    )
    assert await crash(db, job_id) == "FAILED"
    async with db.transaction() as conn:
        assert await evaluate_job(conn, job_id) is None  # decided: nothing more


async def test_a_replica_that_keeps_exiting_restarts_on_a_real_stack_until_deleted(stack: Stack) -> None:
    """All of it at once, real processes: the API's controller makes the replica, the node
    agent runs it, it exits 1 every time, the launcher restarts it with a growing delay;
    the service says so, the job never fails, and a delete stops it."""
    spec = {
        "name": "crashy",
        "kind": "service",
        "tasks": [{"name": "main", "command": "echo starting; exit 1", "ports": {"http": 1}}],
        "service": {"replicas": 1, "port": "http", "drain_s": 0.0},
        "retry": {"backoff_s": 0.2, "max_backoff_s": 0.8},
    }
    async with stack.client() as http:
        assert (await http.post("/api/v1/services", json=spec)).status_code == 201
        status: dict[str, Any] = {}
        for _ in range(300):
            status = (await http.get("/api/v1/services/crashy")).json()
            replicas = status["replica_list"]
            if replicas and replicas[0]["restarts"] >= 3 and replicas[0]["state"] == "CrashLoopBackOff":
                break
            await asyncio.sleep(0.1)
        [replica] = status["replica_list"]
        assert replica["restarts"] >= 3, status
        assert status["state"] == "Degraded"
        assert "task main-0 exited with code 1" in status["reason"]
        assert "crashes in a row" in replica["reason"]
        job = (await http.get(f"/api/v1/jobs/{replica['job_id']}")).json()
        assert job["state"] in {"PENDING", "SCHEDULED", "RUNNING"}  # restarting, never FAILED
        assert job["retries"] >= 3

        assert (await http.delete("/api/v1/services/crashy")).status_code == 202
        await wait_state(http, replica["job_id"], {"CANCELLED"}, timeout_s=30)
        for _ in range(100):
            if (await http.get("/api/v1/services/crashy")).status_code == 404:
                break
            await asyncio.sleep(0.1)
        assert (await http.get("/api/v1/services/crashy")).status_code == 404
