"""Least privilege in Postgres for the node agents: a node agent's role may only call its
node's functions, for its own node, with its node's secret, and write only true events
about its own attempts (the services' roles: ``test_db_roles.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import pytest

from services.launcher.agent.repository import SQL as NODE_SQL
from services.launcher.agent.repository import NodeRepository
from services.launcher.reporting import exited_event, started_events
from shared.db.credentials import (
    mint_node_credential,
    revoke_node_credential,
)
from shared.db.pool import Database
from shared.events import JobRunning, TaskOverLimit, TaskStarted
from shared.events.jobs import TaskOverLimitData
from shared.outbox import outbox_row
from shared.outbox.rows import partitions_of, sources_published_with
from tests.launcher import attempts
from tests.shared.db_roles_support import GivenUpDelivery, login_as

AGENT = "corral/agent"

NODE_A, NODE_B = "node-a", "node-b"


@pytest.fixture
async def agent_db(db: Database, database_url: str, tmp_path: Path) -> AsyncIterator[Database]:
    """A pool logged in as a member of ``corral_agent``, as a node agent connects."""
    async with login_as(db, database_url, "corral_agent", tmp_path) as logged_in:
        yield logged_in


async def _job_of(db: Database, attempt_id: str) -> str:
    return str(await db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", attempt_id))


async def test_a_node_agent_does_what_an_agent_does_for_its_own_node(
    db: Database, agent_db: Database
) -> None:
    await attempts.known_nodes(db, NODE_A)
    first, second = await attempts.assigned(db, NODE_A, instances=2)
    job_id = await _job_of(db, first)
    await db.execute(
        "INSERT INTO api.job_secrets (job_id, name, value) VALUES ($1, 'CORRAL_SECRET_KEY', 'v')", job_id
    )
    node = NodeRepository(agent_db, NODE_A, await mint_node_credential(db, NODE_A))

    epoch = await node.register(30.0, "sandbox", "its own uid", 4)
    assert await node.renew_lease(epoch, 30.0) == epoch
    assert await node.register(30.0, "sandbox", "its own uid", 4) == epoch + 1
    assert await node.renew_lease(epoch, 30.0) is None  # the old epoch is fenced

    assert {row["id"] for row in await node.live_attempts()} == {first, second}
    claimed = await node.claim_attempt(first, epoch + 1)
    assert claimed is not None
    assert claimed["secrets"] == {"CORRAL_SECRET_KEY": "v"}
    assert {p["task_index"] for p in claimed["peers"]} == {0, 1}
    assert await node.claim_attempt(first, epoch + 1) is None  # claimed once
    assert await node.attempt_state(first) == "STARTING"

    started, running = started_events(
        AGENT, attempt_id=first, job_id=job_id, generation=1, node_id=NODE_A, pid=42
    )
    marked = await node.mark_running(first, 42, None, "/logs/first.log", started, running)
    assert marked is not None
    assert marked["job_running"]
    assert await db.fetchval("SELECT state FROM api.jobs WHERE id = $1", job_id) == "RUNNING"

    ended: asyncio.Queue[str] = asyncio.Queue()

    def heard(_conn: object, _pid: int, _channel: str, payload: object) -> None:
        ended.put_nowait(str(payload))

    async with db.connection() as listener:
        await listener.add_listener("corral_attempt_ended", heard)
        exited = exited_event(
            AGENT,
            attempt_id=first,
            job_id=job_id,
            node_id=NODE_A,
            exit_code=0,
            signal=None,
            reason="exited with code 0",
            classification="unknown",
        )
        assert await node.mark_exited(lost=False, exited=exited)
        assert not await node.mark_exited(lost=False, exited=exited)  # reported once
        said = await asyncio.wait_for(ended.get(), 5)  # the launcher decides the job
        assert said.partition(" ")[0] == job_id
        await listener.remove_listener("corral_attempt_ended", heard)
    row = await db.fetchrow(
        "SELECT state, exit_code, pid, log_path FROM launcher.attempts WHERE id = $1", first
    )
    assert dict(row or {}) == {"state": "EXITED", "exit_code": 0, "pid": 42, "log_path": "/logs/first.log"}
    subjects = [r["subject"] for r in await db.fetch("SELECT subject FROM corral.outbox ORDER BY id")]
    assert subjects[-3:] == [
        f"corral.task.started.{NODE_A}",
        f"corral.job.running.{job_id}",
        f"corral.task.exited.{NODE_A}",
    ]

    logs = await node.expired_task_logs([job_id, job_id], ["worker", "worker"], [0, 1], [1, 1], 0.0)
    assert [(row["ord"], row["job_ended"]) for row in logs] == [(1, False)]  # the second runs on

    await node.beat(f"agent-{NODE_A}@host:1:abc")
    assert await db.fetchval("SELECT service FROM corral.service_instances") == f"agent-{NODE_A}"
    await node.goodbye(f"agent-{NODE_A}@host:1:abc")
    assert await db.fetchval("SELECT count(*) FROM corral.service_instances") == 0
    await node.record_dead_letter(
        f"agent-{NODE_A}", GivenUpDelivery(f"corral.task.assigned.{NODE_A}"), "invalid event"
    )
    assert await db.fetchval("SELECT consumer FROM corral.dead_letters") == f"agent-{NODE_A}"


async def test_a_node_agent_cannot_touch_another_nodes_attempts(db: Database, agent_db: Database) -> None:
    await attempts.known_nodes(db, NODE_A, NODE_B)
    [theirs] = await attempts.assigned(db, NODE_B, instances=1)
    [running] = await attempts.assigned(db, NODE_B, instances=1, state="RUNNING")
    job_id = await _job_of(db, running)
    secret_a = await mint_node_credential(db, NODE_A)
    node_a = NodeRepository(agent_db, NODE_A, secret_a)
    epoch = await node_a.register(30.0, "sandbox", "", 4)
    started, running_event = started_events(
        AGENT, attempt_id=running, job_id=job_id, generation=1, node_id=NODE_A, pid=1
    )
    exited = exited_event(
        AGENT,
        attempt_id=running,
        job_id=job_id,
        node_id=NODE_A,
        exit_code=1,
        signal=None,
        reason="",
        classification="unknown",
    )
    refusals: list[Callable[[], object]] = [
        lambda: node_a.claim_attempt(theirs, epoch),
        lambda: node_a.mark_running(running, 1, None, None, started, running_event),
        lambda: node_a.mark_exited(lost=True, exited=exited),
    ]
    for refused in refusals:
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"not one of node {NODE_A}'s"):
            await refused()  # type: ignore[misc]
    assert await node_a.live_attempts() == []
    assert await node_a.attempt_state(running) is None
    # Node A's secret does not make it node B.
    node_a_as_b = NodeRepository(agent_db, NODE_B, secret_a)
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"not node {NODE_B}"):
        await node_a_as_b.live_attempts()
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"not node {NODE_B}"):
        await node_a_as_b.claim_attempt(theirs, epoch)
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="not one of node"):
        await node_a.record_dead_letter(
            f"agent-{NODE_B}", GivenUpDelivery("corral.task.assigned.x"), "forged"
        )
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="not node node-a's agent"):
        await node_a.beat(f"agent-{NODE_B}@host:1:abc")
    states = await db.fetch("SELECT state FROM launcher.attempts ORDER BY state")
    assert [row["state"] for row in states] == ["ASSIGNED", "RUNNING"]  # untouched


async def test_a_wrong_revoked_or_missing_secret_is_refused(db: Database, agent_db: Database) -> None:
    secret = await mint_node_credential(db, NODE_A)
    assert await NodeRepository(agent_db, NODE_A, secret).live_attempts() == []
    for wrong in ("", secret[:-1] + "x", None):
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"not node {NODE_A}"):
            await NodeRepository(agent_db, NODE_A, wrong).register(30.0, "sandbox", "", 4)
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"not node {NODE_B}"):
        await NodeRepository(agent_db, NODE_B, secret).live_attempts()  # no credential at all
    await revoke_node_credential(db, NODE_A)
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"not node {NODE_A}"):
        await NodeRepository(agent_db, NODE_A, secret).live_attempts()
    renewed = await mint_node_credential(db, NODE_A)
    assert await NodeRepository(agent_db, NODE_A, renewed).live_attempts() == []
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await NodeRepository(agent_db, NODE_A, secret).live_attempts()  # the old one stays dead


def test_a_nodes_events_go_to_the_partitions_the_launchers_relay_publishes() -> None:
    """``launcher.check_node_event`` (migration 0025) accepts a node's rows in partitions
    32-47 only: the launcher's block (shared/outbox/rows.PUBLISHERS), whose relay
    publishes them. Should the blocks move, so must that check (a new migration)."""
    accepted = set(range(32, 48))
    assert set(partitions_of((AGENT,))) == accepted
    assert accepted <= set(partitions_of(sources_published_with("corral/launcher")))


async def test_a_node_may_write_only_true_events_about_its_own_attempt(
    db: Database, agent_db: Database
) -> None:
    """The rows it hands over are checked: no event about another attempt or node, of
    another type, or in a partition another service's relay reads."""
    await attempts.known_nodes(db, NODE_A)
    mine, other = await attempts.assigned(db, NODE_A, instances=2, state="STARTING")
    job_id = await _job_of(db, mine)
    secret = await mint_node_credential(db, NODE_A)
    node = NodeRepository(agent_db, NODE_A, secret)

    def events(attempt_id: str = mine, node_id: str = NODE_A) -> tuple[TaskStarted, JobRunning]:
        return started_events(
            AGENT, attempt_id=attempt_id, job_id=job_id, generation=1, node_id=node_id, pid=7
        )

    about_other, _ = events(attempt_id=other)
    right_started, right_running = events()
    as_node_b, _ = events(node_id=NODE_B)
    foreign = right_started.model_copy(update={"source": "corral/api"})
    for started, running in (
        (about_other, right_running),
        (as_node_b, right_running),
        (foreign, right_running),
    ):
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="may not write this event"):
            await node.mark_running(mine, 7, None, None, started, running)
    elsewhere = list(outbox_row(right_started, job_id))
    elsewhere[3] = 0  # a partition of another service's relay
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="may not write this event"):
        await agent_db.fetchrow(
            NODE_SQL.mark_running,
            NODE_A,
            secret,
            mine,
            7,
            None,
            None,
            *elsewhere,
            *outbox_row(right_running, job_id),
        )
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="may not write this event"):
        # a task.started presented as the job's running
        await node.mark_running(mine, 7, None, None, right_started, right_started)  # type: ignore[arg-type]
    submitted = 1
    assert await db.fetchval("SELECT count(*) FROM corral.outbox WHERE aggregate = $1", job_id) == submitted
    assert await db.fetchval("SELECT state FROM launcher.attempts WHERE id = $1", mine) == "STARTING"
    assert await node.mark_running(mine, 7, None, None, right_started, right_running) is not None


async def test_a_node_tells_only_of_its_own_running_attempts_over_their_gpu_share(
    db: Database, agent_db: Database
) -> None:
    """``launcher.node_report_over_limit`` (migration 0037): its own attempt, RUNNING, and
    a true event about it; anything else is refused or writes nothing."""
    await attempts.known_nodes(db, NODE_A, NODE_B)
    [mine] = await attempts.assigned(db, NODE_A, instances=1, state="RUNNING")
    [theirs] = await attempts.assigned(db, NODE_B, instances=1, state="RUNNING")
    [starting] = await attempts.assigned(db, NODE_A, instances=1, state="STARTING")
    node = NodeRepository(agent_db, NODE_A, await mint_node_credential(db, NODE_A))

    async def over(attempt_id: str, **change: object) -> TaskOverLimit:
        facts = {"attempt_id": attempt_id, "job_id": await _job_of(db, attempt_id), "node_id": NODE_A}
        data = TaskOverLimitData.model_validate(
            {**facts, "gpu_index": 0, "used_mb": 50000, "limit_mb": 40779, "action": "killed", **change}
        )
        return TaskOverLimit(source=AGENT, subject=attempt_id, data=data)

    with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"not one of node {NODE_A}'s"):
        await node.report_over_limit(await over(theirs))
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="may not write this event"):
        await node.report_over_limit(await over(mine, node_id=NODE_B))
    assert await node.report_over_limit(await over(starting)) is False  # not running: nothing
    assert await node.report_over_limit(await over(mine)) is True
    subjects = await db.fetch("SELECT subject FROM corral.outbox WHERE subject LIKE 'corral.task.%'")
    assert [row["subject"] for row in subjects] == [f"corral.task.over_limit.{NODE_A}"]
