"""Faults with real processes: killed services, duplicate and poison messages.

The promise: no job is lost, and nothing is launched twice.
"""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from shared.bus.nats import NatsBus
from shared.settings import NatsSettings
from tests.e2e.stack import HOLD, Stack, submit, wait_state


async def _attempt_count(database_url: str, job_id: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM launcher.attempts WHERE job_id = $1", job_id))
    finally:
        await conn.close()


async def test_scheduler_killed_while_a_job_is_pending_loses_nothing(stack: Stack, database_url: str) -> None:
    async with stack.client() as http:
        old = stack.kill("scheduler")
        job_id = await submit(http, "echo survived")
        assert (await http.get(f"/api/v1/jobs/{job_id}")).json()["state"] == "PENDING"
        await stack.wait_restarted("scheduler", old)
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"})
    assert job["state"] == "SUCCEEDED"
    assert await _attempt_count(database_url, job_id) == 1


async def test_launcher_killed_while_a_job_runs_loses_nothing(stack: Stack, database_url: str) -> None:
    async with stack.client() as http:
        job_id = await submit(http, HOLD)
        await wait_state(http, job_id, {"RUNNING"})
        old = stack.kill("launcher")
        stack.release(job_id)  # the task ends while the launcher is down
        await stack.wait_restarted("launcher", old)
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"})
        assert job["state"] == "SUCCEEDED"
        assert (await http.get(f"/api/v1/jobs/{job_id}/logs")).text == "released\n"
    assert await _attempt_count(database_url, job_id) == 1


async def test_launcher_killed_before_it_sees_a_placement_loses_nothing(
    stack: Stack, database_url: str
) -> None:
    async with stack.client() as http:
        old = stack.kill("launcher")
        job_id = await submit(http, "echo placed while the launcher was down")
        await wait_state(http, job_id, {"SCHEDULED"})
        await stack.wait_restarted("launcher", old)
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"})
    assert job["state"] == "SUCCEEDED"
    assert await _attempt_count(database_url, job_id) == 1


async def test_node_agent_killed_mid_task_re_adopts_it_instead_of_relaunching(
    stack: Stack, database_url: str
) -> None:
    async with stack.client() as http:
        job_id = await submit(http, f"echo started; {HOLD}")
        job = await wait_state(http, job_id, {"RUNNING"})
        old = stack.kill("agent")
        await stack.wait_restarted("agent", old)
        await asyncio.sleep(1.5)  # the new agent's reconcile pass re-adopts the task
        stack.release(job_id)
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"})
        assert job["state"] == "SUCCEEDED", job
        # One process ran from start to end: started once, released once.
        assert (await http.get(f"/api/v1/jobs/{job_id}/logs")).text == "started\nreleased\n"
    assert await _attempt_count(database_url, job_id) == 1
    assert "re-adopting running attempt" in stack.logs("agent")


async def test_redelivered_events_launch_nothing_twice(
    stack: Stack, nats_url: str, database_url: str
) -> None:
    async with stack.client() as http:
        job_id = await submit(http, "echo once")
        await wait_state(http, job_id, {"SUCCEEDED"})
        await asyncio.sleep(0.5)

        # Replay every event of the job as if redelivered after the duplicate window:
        # same payloads (same event ids), new Nats-Msg-Ids so JetStream keeps them.
        bus = await NatsBus.connect(NatsSettings(url=nats_url))
        sub = await bus.js.subscribe("corral.>", ordered_consumer=True, stream="CORRAL_JOBS")
        originals = []
        try:
            while True:
                try:
                    msg = await sub.next_msg(timeout=1.0)
                except TimeoutError:
                    break
                if job_id.encode() in msg.data:
                    originals.append((msg.subject, msg.data))
            for subject, data in originals:
                await bus.publish(subject, data, msg_id=str(uuid.uuid4()))
        finally:
            await sub.unsubscribe()
            await bus.close()
        replayed = len(originals)
        assert replayed >= 7
        await asyncio.sleep(2.0)

        job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
        assert job["state"] == "SUCCEEDED"
        assert (await http.get(f"/api/v1/jobs/{job_id}/logs")).text == "once\n"
    assert await _attempt_count(database_url, job_id) == 1


async def test_a_poison_message_is_dead_lettered_and_work_goes_on(
    stack: Stack, nats_url: str, database_url: str
) -> None:
    bus = await NatsBus.connect(NatsSettings(url=nats_url))
    try:
        await bus.publish(
            "corral.job.submitted.junk", b'{"type": "corral.job.submitted.v1", "oops": 1}', msg_id="p1"
        )
    finally:
        await bus.close()
    async with stack.client() as http:
        job_id = await submit(http, "echo still working")
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"})
    assert job["state"] == "SUCCEEDED"
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT consumer, subject, reason FROM corral.dead_letters")
    finally:
        await conn.close()
    assert {row["consumer"] for row in rows} == {"scheduler-jobs"}
    assert rows[0]["subject"] == "corral.job.submitted.junk"
    assert "invalid event" in rows[0]["reason"]
