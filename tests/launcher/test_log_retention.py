"""A node's retention of its task logs (services/launcher/log_retention.py, real
Postgres): the log of an attempt that ended longer ago than the retention is deleted,
a live attempt's never (however old the file), nor one that ended lately, nor a file
Postgres knows no attempt of; and the API, asked for a deleted log, says it was removed
after the node's retention (through real NATS, as it asks in the service)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from services.api.jobs.logs import AttemptLog
from services.api.jobs.repository import JobRepository
from services.launcher.log_retention import LogRetention
from services.launcher.task_logs import LogServer, attempt_log_path
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.errors import NotFound
from shared.node_logs import LOGS_QUEUE, logs_subject
from tests.launcher import attempts

NODE = "node-a"
WEEK_H = 168.0
LONG_AGO_H = 200  # more than a week


async def job_with_attempts(
    db: Database, job_state: str, *attempt_ended_h: float | None
) -> tuple[str, list[str]]:
    """A job in ``job_state`` with one attempt per task: ended that many hours ago, or
    still RUNNING (None)."""
    ids = await attempts.assigned(db, NODE, instances=len(attempt_ended_h), state="RUNNING")
    job_id = str(await db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", ids[0]))
    await db.execute("UPDATE api.jobs SET state = $2 WHERE id = $1", job_id, job_state)
    for attempt_id, hours in zip(ids, attempt_ended_h, strict=True):
        if hours is not None:
            await db.execute(
                "UPDATE launcher.attempts SET state = 'EXITED', exit_code = 0,"
                " finished_at = now() - make_interval(hours => $2) WHERE id = $1",
                attempt_id,
                hours,
            )
    return job_id, ids


def write_log(log_dir: Path, job_id: str, index: int, text: str = "hello\n") -> Path:
    path = attempt_log_path(log_dir, job_id, "worker", index, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    long_ago = time.time() - LONG_AGO_H * 3600  # the file too: age is the attempt's, not the file's
    os.utime(path, (long_ago, long_ago))
    return path


async def test_logs_of_attempts_ended_before_the_retention_go_and_the_others_stay(
    db: Database, tmp_path: Path
) -> None:
    await attempts.known_nodes(db, NODE)
    logs = tmp_path / "logs"
    done, _ = await job_with_attempts(db, "SUCCEEDED", LONG_AGO_H)
    done_log = write_log(logs, done, 0)
    cursor = done_log.with_name(done_log.name + ".cursor")  # a companion (the pod runner's)
    cursor.write_text("{}")
    # A job still running: a task that ended long ago (retried since), one live, one
    # that ended an hour ago.
    running, _ = await job_with_attempts(db, "RUNNING", LONG_AGO_H, None, 1)
    old, live, recent = (write_log(logs, running, index) for index in range(3))
    unknown = write_log(logs, "job-nobody-knows", 0)
    service_log = logs / "services" / "agent.log"  # make up keeps its services' logs here
    service_log.parent.mkdir()
    service_log.write_text("started\n")

    assert await LogRetention(db, logs, WEEK_H).sweep() == 2

    assert not done_log.exists()
    assert not cursor.exists()
    assert not (logs / done).exists(), "an ended job's emptied directories go too"
    assert not old.exists()
    assert old.parent.exists(), "a job that may still run keeps its directories"
    assert live.read_text() == "hello\n", "a live task's log is never deleted"
    assert recent.exists()
    assert unknown.exists(), "a file of no known attempt is not this node's to judge"
    assert service_log.exists()
    assert await LogRetention(db, logs, WEEK_H).sweep() == 0


async def test_a_retention_of_zero_keeps_every_log(db: Database, tmp_path: Path) -> None:
    await attempts.known_nodes(db, NODE)
    job_id, _ = await job_with_attempts(db, "SUCCEEDED", 10 * 365 * 24)
    path = write_log(tmp_path, job_id, 0)
    assert await LogRetention(db, tmp_path, 0).sweep() == 0
    assert path.exists()


@asynccontextmanager
async def answering(bus: NatsBus, server: LogServer) -> AsyncIterator[None]:
    """The node's agent answering for its logs, as it does in the service."""
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(bus.answer(logs_subject(NODE), LOGS_QUEUE, server.answer))
        await bus.nc.flush()
        await asyncio.sleep(0.05)  # subscribed (it subscribes in its own task)
        yield
        task.cancel()


async def test_the_api_says_a_log_was_removed_after_the_nodes_retention(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    await attempts.known_nodes(db, NODE)
    job_id, (attempt_id,) = await job_with_attempts(db, "SUCCEEDED", LONG_AGO_H)
    await db.execute("UPDATE launcher.attempts SET log_path = 'recorded' WHERE id = $1", attempt_id)
    write_log(tmp_path, job_id, 0)
    repo = JobRepository(db)
    row = await repo.attempt_for_logs(job_id, "worker", 0, None)
    assert row is not None

    async def ask(subject: str, question: bytes) -> bytes:
        return await bus.request(subject, question, 5)

    log = AttemptLog(ask, repo, row, patience_s=1)
    async with answering(bus, LogServer(tmp_path, WEEK_H)):
        assert await log.tail(1024) == b"hello\n"
        await LogRetention(db, tmp_path, WEEK_H).sweep()
        with pytest.raises(NotFound) as removed:
            await log.tail(1024)
        with pytest.raises(NotFound) as removed_while_following:
            await log.check_followable()
    detail = removed.value.detail
    assert detail.startswith(
        f"the log of attempt 1 of task worker-0 was removed from node {NODE}, which keeps the logs"
        " of ended attempts for 168 hours (CORRAL_AGENT_LOG_RETENTION_HOURS); it ended at "
    )
    assert detail.endswith("(8 days ago)")
    assert removed_while_following.value.detail == detail
