"""The launcher decides a job as soon as a node reports one of its attempts ended: the
node's function NOTIFYs, the launcher listens (``attempt_ends.py``); real Postgres."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from services.launcher import reconcile, reporting
from services.launcher.agent.repository import NodeRepository
from services.launcher.attempt_ends import AttemptEnds
from services.launcher.reporting import exited_event
from services.launcher.shards import WHOLE, Shard
from shared.db.pool import Database
from tests.launcher import attempts

NODE = "node-a"


@asynccontextmanager
async def listening(
    db: Database, concurrency: int = 2, shard: Shard = WHOLE, listeners: int = 1
) -> AsyncIterator[AttemptEnds]:
    """The launcher's listener, running (and listening) for the block; ``listeners``:
    how many LISTENs to wait for (this one's and those of others already running)."""
    ends = AttemptEnds(db, concurrency=concurrency, shard=shard)
    task = asyncio.create_task(ends.run())
    try:
        for _ in range(100):  # until its LISTEN is in
            if (
                await db.fetchval(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND query LIKE 'LISTEN%corral_attempt_ended%'"
                )
                >= listeners
            ):
                break
            await asyncio.sleep(0.02)
        yield ends
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _end(node: NodeRepository, attempt_id: str, job_id: str, exit_code: int) -> bool:
    exited = exited_event(
        "corral/agent",
        attempt_id=attempt_id,
        job_id=job_id,
        node_id=NODE,
        exit_code=exit_code,
        signal=None,
        reason=f"exited with code {exit_code}",
        classification="unknown" if exit_code == 0 else "permanent",
    )
    return await node.mark_exited(lost=False, exited=exited)


async def _state_becomes(db: Database, job_id: str, wanted: str) -> None:
    for _ in range(250):
        if await db.fetchval("SELECT state FROM api.jobs WHERE id = $1", job_id) == wanted:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"job {job_id} did not become {wanted} within 5 s")


async def test_a_nodes_report_of_a_gangs_last_end_is_decided_at_once(db: Database) -> None:
    await attempts.known_nodes(db, NODE)
    first, second = await attempts.assigned(db, NODE, instances=2, state="RUNNING")
    job_id = await db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", first)
    await db.execute("UPDATE api.jobs SET state = 'RUNNING' WHERE id = $1", job_id)
    node = NodeRepository(db, NODE, None)  # (the owner needs no secret)
    async with listening(db) as ends:
        assert await _end(node, first, job_id, 0)
        for _ in range(100):
            if ends.decided:
                break
            await asyncio.sleep(0.02)
        assert ends.decided == 1
        assert await db.fetchval("SELECT state FROM api.jobs WHERE id = $1", job_id) == "RUNNING"  # one to go
        assert await _end(node, second, job_id, 0)
        await _state_becomes(db, job_id, "SUCCEEDED")
    subjects = [r["subject"] for r in await db.fetch("SELECT subject FROM corral.outbox ORDER BY id")]
    assert [".".join(s.split(".")[1:3]) for s in subjects[-3:]] == [
        "task.exited",
        "task.exited",
        "job.succeeded",
    ]


async def test_a_job_named_again_while_it_waits_is_decided_once(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of a gang's ends (and two launchers' worth of NOTIFYs) queue the job once;
    decisions run side by side, never more than ``concurrency`` at a time."""
    running = 0
    most = 0
    decided: list[str] = []
    release = asyncio.Event()

    async def deciding(_db: Database, job_id: str) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await release.wait()
        decided.append(job_id)
        running -= 1

    monkeypatch.setattr("services.launcher.attempt_ends.decide_job", deciding)
    ends = AttemptEnds(db, concurrency=2)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(ends.run())
        for job_id in ("job-1", "job-2", "job-3", "job-3", "job-4"):
            ends.ended(job_id)
        await asyncio.sleep(0.05)
        assert most == 2  # two at a time
        ends.ended("job-1")  # ended again while being decided: decided once more after
        ends.ended("job-4")  # (still waiting: once)
        release.set()
        for _ in range(100):
            if len(decided) == 5:
                break
            await asyncio.sleep(0.01)
        task.cancel()
    assert sorted(decided) == ["job-1", "job-1", "job-2", "job-3", "job-4"]
    assert most == 2


async def test_a_decision_that_fails_is_left_to_the_reconcile_loop(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await attempts.known_nodes(db, NODE)
    [attempt_id] = await attempts.assigned(db, NODE, instances=1, state="RUNNING")
    job_id = await db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", attempt_id)
    await db.execute("UPDATE api.jobs SET state = 'RUNNING' WHERE id = $1", job_id)

    async def broken(conn: object, job_id: str) -> None:
        raise RuntimeError("a bug in the completion rules")

    async with listening(db) as ends:
        with monkeypatch.context() as patched:
            patched.setattr(reporting, "evaluate_job", broken)
            assert await _end(NodeRepository(db, NODE, None), attempt_id, job_id, 3)
            for _ in range(100):
                if ends.decided:
                    break
                await asyncio.sleep(0.02)
        assert ends.decided == 1  # tried, failed, logged: the listener lives on
    assert await db.fetchval("SELECT state FROM api.jobs WHERE id = $1", job_id) == "RUNNING"
    assert (await reconcile.reconcile(db))["jobs_decided"] == 1
    assert await db.fetchval("SELECT state FROM api.jobs WHERE id = $1", job_id) == "FAILED"


async def test_launchers_sharing_the_work_each_decide_only_the_jobs_of_their_shard(db: Database) -> None:
    """Both hear the end; the one whose shard holds the job decides it, the other leaves it
    (services/launcher/shards.py)."""
    await attempts.known_nodes(db, NODE)
    (attempt,) = await attempts.assigned(db, NODE, instances=1, state="RUNNING")
    job_id = await db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", attempt)
    await db.execute("UPDATE api.jobs SET state = 'RUNNING' WHERE id = $1", job_id)
    owner = next(index for index in range(2) if Shard(index, 2).owns(job_id))
    node = NodeRepository(db, NODE, None)
    async with (
        listening(db, shard=Shard(1 - owner, 2)) as other,
        listening(db, shard=Shard(owner, 2), listeners=2) as deciding,
    ):
        assert await _end(node, attempt, job_id, 0)
        await _state_becomes(db, job_id, "SUCCEEDED")
        await asyncio.sleep(0.2)  # time for the other to have decided too, were it to
        assert (deciding.decided, other.decided) == (1, 0)
