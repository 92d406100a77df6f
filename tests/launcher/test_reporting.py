"""What a node's reports write, on real Postgres: the Kubernetes runner's statements (a
node agent's functions repeat them: tests/shared/test_db_node_roles.py). "Started": the
attempt RUNNING and ``task.started``; for the job's first task to run, in the same
statement, the job RUNNING and ``job.running`` after it. "Ended": the attempt's end and
``task.exited``, then the job's decision. A report that is not the node's to make:
nothing."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import REGISTRY

from services.launcher import reconcile, reporting
from services.launcher.reporting import report_end, report_started
from shared.db.pool import Database
from tests.launcher import attempts

NODE = "node-a"


def _count(metric: str) -> float:
    return REGISTRY.get_sample_value(f"{metric}_count") or 0.0


async def _report(db: Database, attempt_id: str, job_id: str, node: str = NODE) -> bool:
    return await report_started(
        db,
        "corral/agent",
        attempt_id=attempt_id,
        job_id=job_id,
        generation=1,
        node_id=node,
        pid=4242,
        pid_start_ticks=None,
        log_path="/tmp/attempt.log",
    )


async def test_the_first_task_to_run_makes_its_job_running_in_the_same_statement(db: Database) -> None:
    await attempts.known_nodes(db, NODE)
    first, second = await attempts.assigned(db, NODE, instances=2, state="STARTING")
    job_id = await db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", first)
    version = await db.fetchval("SELECT version FROM api.jobs WHERE id = $1", job_id)
    launches, starts = _count("corral_launch_latency_seconds"), _count("corral_job_start_latency_seconds")

    # Another node's agent may not report it: nothing changes, nothing is said.
    assert not await _report(db, first, job_id, node="node-b")
    assert await db.fetchval("SELECT state FROM api.jobs WHERE id = $1", job_id) == "SCHEDULED"

    assert await _report(db, first, job_id)
    job = await db.fetchrow("SELECT state, version FROM api.jobs WHERE id = $1", job_id)
    assert job is not None
    assert (job["state"], job["version"]) == ("RUNNING", version + 1)
    assert _count("corral_launch_latency_seconds") == launches + 1
    assert _count("corral_job_start_latency_seconds") == starts + 1

    # The gang's second task: its own event only; the job was RUNNING already.
    assert await _report(db, second, job_id)
    # Reported twice (a retried report): the attempt is RUNNING, so nothing more.
    assert not await _report(db, second, job_id)
    assert await db.fetchval("SELECT version FROM api.jobs WHERE id = $1", job_id) == version + 1
    assert _count("corral_launch_latency_seconds") == launches + 1

    subjects = [
        ".".join(row["subject"].split(".")[:3])  # corral.<kind>.<what>.<node or job>
        for row in await db.fetch(
            "SELECT subject FROM corral.outbox WHERE aggregate = $1 ORDER BY id", job_id
        )
    ]
    assert subjects[-3:] == ["corral.task.started", "corral.job.running", "corral.task.started"]
    assert subjects.count("corral.job.running") == 1
    states = await db.fetch("SELECT state FROM launcher.attempts WHERE job_id = $1", job_id)
    assert [row["state"] for row in states] == ["RUNNING", "RUNNING"]


async def test_a_report_waits_for_a_launcher_holding_the_job_and_never_deadlocks_with_it(
    db: Database,
) -> None:
    """The launcher locks a job, then updates its attempts (a cancel's stop requests).
    A report that updated the attempt first and the job second would deadlock with it
    (Postgres would abort one after a second); the report locks the job first."""
    await attempts.known_nodes(db, NODE)
    [attempt_id] = await attempts.assigned(db, NODE, instances=1, state="STARTING")
    job_id = await db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", attempt_id)
    async with db.transaction() as launcher:
        await launcher.execute("SET LOCAL lock_timeout = '3s'")
        await launcher.execute("SELECT 1 FROM api.jobs WHERE id = $1 FOR UPDATE", job_id)
        report = asyncio.create_task(_report(db, attempt_id, job_id))
        await asyncio.sleep(0.3)
        assert not report.done()  # it waits for the job
        # ...holding nothing the launcher needs: the attempt is free to update.
        await launcher.execute(
            "UPDATE launcher.attempts SET stop_requested_at = now() WHERE id = $1", attempt_id
        )
    assert await asyncio.wait_for(report, 5)
    assert await db.fetchval("SELECT state FROM api.jobs WHERE id = $1", job_id) == "RUNNING"


async def _end(db: Database, attempt_id: str, job_id: str, exit_code: int) -> bool:
    return await report_end(
        db,
        "corral/agent",
        attempt_id=attempt_id,
        job_id=job_id,
        node_id=NODE,
        lost=False,
        exit_code=exit_code,
        signal=None,
        reason=f"exit code {exit_code}",
        classification="unknown" if exit_code == 0 else "permanent",  # as the table has it
    )


async def _job_events(db: Database, job_id: str) -> list[str]:
    rows = await db.fetch("SELECT subject FROM corral.outbox WHERE aggregate = $1 ORDER BY id", job_id)
    return [".".join(row["subject"].split(".")[1:3]) for row in rows]


async def test_the_report_of_a_gangs_last_end_decides_the_job(db: Database) -> None:
    await attempts.known_nodes(db, NODE)
    first, second = await attempts.assigned(db, NODE, instances=2, state="STARTING")
    job_id = await db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", first)
    assert await _report(db, first, job_id)
    assert await _report(db, second, job_id)

    assert await _end(db, first, job_id, 0)
    assert await db.fetchval("SELECT state FROM api.jobs WHERE id = $1", job_id) == "RUNNING"  # one to go
    assert not await _end(db, first, job_id, 0)  # reported again: not its to report, nothing decided
    assert await _end(db, second, job_id, 0)
    job = await db.fetchrow("SELECT state, exit_code FROM api.jobs WHERE id = $1", job_id)
    assert job is not None
    assert (job["state"], job["exit_code"]) == ("SUCCEEDED", 0)
    assert (await _job_events(db, job_id))[-3:] == ["task.exited", "task.exited", "job.succeeded"]


async def test_a_decision_that_fails_is_left_to_the_launchers_reconcile_loop(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await attempts.known_nodes(db, NODE)
    [attempt_id] = await attempts.assigned(db, NODE, instances=1, state="STARTING")
    job_id = await db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", attempt_id)
    assert await _report(db, attempt_id, job_id)

    async def broken(conn: object, job_id: str) -> None:
        raise RuntimeError("a bug in the completion rules")

    with monkeypatch.context() as patched:
        patched.setattr(reporting, "evaluate_job", broken)
        assert await _end(db, attempt_id, job_id, 3)  # the end is recorded all the same
    assert await db.fetchval("SELECT state FROM launcher.attempts WHERE id = $1", attempt_id) == "EXITED"
    assert await db.fetchval("SELECT state FROM api.jobs WHERE id = $1", job_id) == "RUNNING"

    repaired = await reconcile.reconcile(db)
    assert repaired["jobs_decided"] == 1
    job = await db.fetchrow("SELECT state, exit_code FROM api.jobs WHERE id = $1", job_id)
    assert job is not None
    assert (job["state"], job["exit_code"]) == ("FAILED", 3)  # permanent: not retried
