"""Faults with real processes: killed services, duplicate and poison messages.

The promise: no job is lost, and nothing is launched twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import nats.js.errors
import pytest

from shared.bus.nats import NatsBus
from shared.bus.streams import JOBS
from shared.settings import NatsSettings
from tests.e2e.stack import HOLD, Stack, submit, wait_state

# The consumers that could launch a task twice: the launcher's (an attempt for each
# job.scheduled) and the node agent's (a process for each task.assigned).
LAUNCHING_CONSUMERS = ("launcher", "agent-local")


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


BURST = 60
# The attempts the launcher has made for the burst's jobs so far.
BURST_ATTEMPTS = (
    "SELECT count(*) FROM launcher.attempts a JOIN api.jobs j ON j.id = a.job_id WHERE j.name LIKE 'burst-%'"
)


async def _kill_amid_a_burst(
    stack: Stack, database_url: str, service: str, made: str
) -> tuple[list[str], int]:
    """Submit ``BURST`` GPU-less jobs at once (a scheduling cycle places many, and the
    launcher turns them into attempts several at a time), SIGKILL ``service`` as soon as
    ``made`` (a count over the burst's jobs) is above zero, watched while the submits
    are still going, and wait for it to be back. The jobs, and ``made`` at the kill."""
    conn = await asyncpg.connect(database_url)
    try:
        async with stack.client() as http:
            submits = [submit(http, "true", gpus=0, name=f"burst-{i}") for i in range(BURST)]
            submitting = asyncio.ensure_future(asyncio.gather(*submits))
            for _ in range(4000):
                if await conn.fetchval(made):
                    break
                await asyncio.sleep(0.002)
            old = stack.kill(service)
            at_kill = int(await conn.fetchval(made))
            jobs = list(await submitting)
        await stack.wait_restarted(service, old)
    finally:
        await conn.close()
    return jobs, at_kill


async def _each_ran_once(stack: Stack, database_url: str, jobs: list[str]) -> None:
    async with stack.client() as http:
        for job_id in jobs:
            assert (await wait_state(http, job_id, {"SUCCEEDED", "FAILED"}))["state"] == "SUCCEEDED"
    conn = await asyncpg.connect(database_url)
    try:
        counts = await conn.fetch(
            "SELECT job_id, count(*) AS n FROM launcher.attempts WHERE job_id = any($1) GROUP BY job_id", jobs
        )
    finally:
        await conn.close()
    assert {r["job_id"]: r["n"] for r in counts} == dict.fromkeys(jobs, 1)


async def test_launcher_killed_amid_a_burst_of_placements_loses_none_and_launches_none_twice(
    stack: Stack, database_url: str
) -> None:
    jobs, at_kill = await _kill_amid_a_burst(stack, database_url, "launcher", BURST_ATTEMPTS)
    assert 0 < at_kill < BURST, f"the launcher was killed with {at_kill} of {BURST} placements handled"
    await _each_ran_once(stack, database_url, jobs)


async def test_two_launchers_share_a_burst_and_one_killed_amid_it_loses_none_and_launches_none_twice(
    database_url: str, nats_url: str, tmp_path: Path
) -> None:
    """CORRAL_LAUNCHER_PROCESSES=2 (services/launcher/shards.py): both take placements from
    the one consumer; the first is killed while they do, the other goes on, JetStream
    hands the dead one's unacknowledged placements on, and its share of the decisions is
    made by the repair loop or by itself once restarted."""
    env = {"CORRAL_DATABASE_URL": database_url, "CORRAL_NATS_URL": nats_url, "CORRAL_LAUNCHER_PROCESSES": "2"}
    async with Stack(tmp_path / "home", env).running() as stack:
        assert stack.pid("launcher") != stack.pid("launcher-2")
        jobs, at_kill = await _kill_amid_a_burst(stack, database_url, "launcher", BURST_ATTEMPTS)
        assert 0 < at_kill < BURST, f"the launcher was killed with {at_kill} of {BURST} placements handled"
        await _each_ran_once(stack, database_url, jobs)
        ports = json.loads((stack.home / "run" / "health-ports.json").read_text())
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(f"http://127.0.0.1:{ports['launcher-2']}/metrics")).text
        handled = _sample(metrics, 'corral_events_consumed_total{consumer="launcher",outcome="acked"}')
        assert handled >= 1, "the second launcher (never killed) handled no event of the burst"


def _sample(metrics: str, name: str) -> float:
    """A sample's value in Prometheus text, 0 when absent."""
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


async def test_scheduler_killed_as_a_burst_is_placed_loses_none_and_places_none_twice(
    stack: Stack, database_url: str
) -> None:
    placed = (
        "SELECT count(DISTINCT a.job_id) FROM scheduler.allocations a"
        " JOIN api.jobs j ON j.id = a.job_id WHERE j.name LIKE 'burst-%'"
    )
    # A cycle's placements commit together: the kill lands after one commits, with its
    # events published on commit or still in the outbox, and later cycles' jobs unplaced.
    jobs, at_kill = await _kill_amid_a_burst(stack, database_url, "scheduler", placed)
    assert at_kill > 0
    await _each_ran_once(stack, database_url, jobs)
    conn = await asyncpg.connect(database_url)
    try:
        generations = await conn.fetch("SELECT DISTINCT generation FROM api.jobs WHERE id = any($1)", jobs)
    finally:
        await conn.close()
    assert [r["generation"] for r in generations] == [1], "a job was placed twice"


@pytest.fixture
async def stack(database_url: str, nats_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """On the test's own NATS, open to anyone: these tests replay and forge events, and
    start a second node by hand, as whoever they like (the bus's identities have tests
    of their own: tests/shared/test_bus_identities.py, tests/e2e/test_node_join.py)."""
    env = {"CORRAL_DATABASE_URL": database_url, "CORRAL_NATS_URL": nats_url}
    async with Stack(tmp_path / "home", env).running() as running:
        yield running


@pytest.fixture
async def patient_stack(database_url: str, nats_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """A stack whose node lease outlasts a node agent's restart on a loaded machine.

    The fast loops' 3-second lease is right for the test of a node that loses contact;
    for the agent-restart tests it made them a race: with the machine busy, the restarted
    agent could take longer than the lease, its node was declared lost and the task
    killed instead of re-adopted (seen when several test runs shared the two cores)."""
    env = {"CORRAL_DATABASE_URL": database_url, "CORRAL_NATS_URL": nats_url, "CORRAL_AGENT_LEASE_S": "15"}
    async with Stack(tmp_path / "home", env).running() as stack:
        yield stack


async def test_node_agent_killed_mid_task_re_adopts_it_instead_of_relaunching(
    patient_stack: Stack, database_url: str
) -> None:
    stack = patient_stack
    async with stack.client() as http:
        job_id = await submit(http, f"echo started; {HOLD}")
        job = await wait_state(http, job_id, {"RUNNING"})
        old = stack.kill("agent")
        await stack.wait_restarted("agent", old)
        # Released only once the new agent has re-adopted it: a fixed wait raced a new agent
        # slow to start on a loaded machine (the task ended first, and was settled instead).
        for _ in range(300):
            if "re-adopting running attempt" in stack.logs("agent"):
                break
            await asyncio.sleep(0.1)
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
            delivered = {durable: await _delivered(bus, durable) for durable in LAUNCHING_CONSUMERS}
            for subject, data in originals:
                await bus.publish(subject, data, msg_id=str(uuid.uuid4()))
            assert len(originals) >= 7
            await _wait_handled(bus, delivered)
        finally:
            await sub.unsubscribe()
            await bus.close()

        job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
        assert job["state"] == "SUCCEEDED"
        assert (await http.get(f"/api/v1/jobs/{job_id}/logs")).text == "once\n"
    assert await _attempt_count(database_url, job_id) == 1


async def _delivered(bus: NatsBus, durable: str) -> int:
    return int((await bus.js.consumer_info(JOBS.name, durable)).delivered.consumer_seq)


async def _wait_handled(bus: NatsBus, delivered: dict[str, int], timeout_s: float = 30.0) -> None:
    """Until each consumer has been delivered more than ``delivered`` says (the replays
    reached it), has nothing left to deliver, and has acked all it was given: a consumer
    acks once its handler has run to the end, so the replays' effects are all in."""
    deadline = time.monotonic() + timeout_s
    while True:
        busy = {}
        for durable, before in delivered.items():
            info = await bus.js.consumer_info(JOBS.name, durable)
            if info.delivered.consumer_seq <= before or info.num_pending or info.num_ack_pending:
                busy[durable] = (info.delivered.consumer_seq - before, info.num_pending, info.num_ack_pending)
        if not busy:
            return
        assert time.monotonic() < deadline, f"replays not handled (new deliveries, pending, unacked): {busy}"
        await asyncio.sleep(0.1)


async def test_a_poison_message_is_dead_lettered_and_work_goes_on(
    stack: Stack, nats_url: str, database_url: str
) -> None:
    bus = await NatsBus.connect(NatsSettings(url=nats_url))
    try:
        # The launcher's consumer must exist before the message (the stack is "ready" once
        # the API answers, which can be sooner).
        for _ in range(100):
            try:
                await bus.js.consumer_info(JOBS.name, "launcher")
                break
            except nats.js.errors.NotFoundError:
                await asyncio.sleep(0.1)
        await bus.publish(
            "corral.job.scheduled.junk", b'{"type": "corral.job.scheduled.v1", "oops": 1}', msg_id="p1"
        )
    finally:
        await bus.close()
    async with stack.client() as http:
        job_id = await submit(http, "echo still working")
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"})
    assert job["state"] == "SUCCEEDED"
    conn = await asyncpg.connect(database_url)
    try:
        for _ in range(100):
            rows = await conn.fetch("SELECT consumer, subject, reason FROM corral.dead_letters")
            if "launcher" in {row["consumer"] for row in rows}:
                break
            await asyncio.sleep(0.1)
    finally:
        await conn.close()
    # Every consumer of the stream that took it records it (the API's webhook fan-in runs
    # only while a webhook exists).
    assert "launcher" in {row["consumer"] for row in rows}
    assert {row["subject"] for row in rows} == {"corral.job.scheduled.junk"}
    assert all("invalid event" in row["reason"] for row in rows)


async def test_a_node_that_loses_contact_has_its_tasks_retried_elsewhere_and_killed_on_return(
    stack: Stack, database_url: str
) -> None:
    other = stack.start_node("node-b")
    conn = await asyncpg.connect(database_url)
    try:
        async with stack.client() as http:
            await stack.wait_nodes_ready(2)  # node-b's agent holds a lease and its exporter is heard
            job_id = await submit(http, f"echo on $CORRAL_ATTEMPT; {HOLD}", gpus=8)
            job = await wait_state(http, job_id, {"RUNNING"})
            first = job["attempts"][0]
            first_pid = await conn.fetchval("SELECT pid FROM launcher.attempts WHERE id = $1", first["id"])
            victim = "agent" if first["node_id"] == "local" else None
            assert victim is not None, f"expected the first placement on 'local', got {first['node_id']}"

            # The node's agent freezes (its task keeps running): no lease renewals.
            os.kill(stack.pid("agent"), signal.SIGSTOP)
            try:
                job = await wait_state(http, job_id, {"RUNNING"}, timeout_s=30)
                for _ in range(200):
                    job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
                    if len(job["attempts"]) == 2 and job["state"] == "RUNNING":
                        break
                    await asyncio.sleep(0.1)
                lost, moved = sorted(job["attempts"], key=lambda a: a["attempt_no"])
                assert lost["state"] == "LOST"
                assert lost["classification"] == "transient"
                assert "lease expired" in lost["reason"]
                assert moved["node_id"] == "node-b"
                assert job["retries"] == 0, "a lost node is not the job's fault"
                assert _alive(first_pid), "the frozen node's task is still running: it is stale"
            finally:
                os.kill(stack.pid("agent"), signal.SIGCONT)

            # Back in contact, the agent finds itself fenced and kills the stale task.
            for _ in range(100):
                if not _alive(first_pid):
                    break
                await asyncio.sleep(0.1)
            assert not _alive(first_pid), "the returning agent must kill its stale task"
            stack.release(job_id)
            job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"})
            assert job["state"] == "SUCCEEDED"
            states = sorted((a["attempt_no"], a["node_id"], a["state"]) for a in job["attempts"])
            assert states == [(1, "local", "LOST"), (2, "node-b", "EXITED")]
            live = await conn.fetchval(
                "SELECT count(*) FROM launcher.attempts WHERE state IN ('ASSIGNED', 'STARTING', 'RUNNING')"
            )
            assert live == 0
    finally:
        await conn.close()
        for process in other:
            process.terminate()
            process.wait(10)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


async def test_a_cancel_sent_while_the_node_agent_was_down_still_stops_the_task(patient_stack: Stack) -> None:
    stack = patient_stack
    trap = "trap 'echo got SIGTERM; exit 143' TERM; echo started; while true; do sleep 0.05; done"
    async with stack.client() as http:
        job_id = await submit(http, trap)
        await wait_state(http, job_id, {"RUNNING"})
        await asyncio.sleep(0.3)
        old = stack.kill("agent")  # the task keeps running without its agent
        assert (await http.post(f"/api/v1/jobs/{job_id}/cancel")).status_code == 200
        await stack.wait_restarted("agent", old)
        # The new agent re-adopts the task, sees the pending stop, and signals it.
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout_s=30)
        assert job["state"] == "CANCELLED"
        assert (await http.get(f"/api/v1/jobs/{job_id}/logs")).text.endswith("got SIGTERM\n")
