"""The first job, end to end, through every service running as a real process."""

from __future__ import annotations

import asyncio

import asyncpg

from shared.bus.nats import NatsBus
from shared.events import parse_event
from shared.settings import NatsSettings
from tests.e2e.stack import HOLD, Stack, corral, submit, wait_state


async def lifecycle_events(nats: NatsSettings, job_id: str) -> list[str]:
    """Every event about the job, in stream order, read back from JetStream."""
    bus = await NatsBus.connect(nats)
    sub = await bus.js.subscribe("corral.>", ordered_consumer=True, stream="CORRAL_JOBS")
    types: list[str] = []
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except TimeoutError:
                return types
            event = parse_event(msg.data)
            if getattr(event.data, "job_id", None) == job_id:
                types.append(event.type.removeprefix("corral.").removesuffix(".v1"))
    finally:
        await sub.unsubscribe()
        await bus.close()


async def test_hello_runs_through_every_service(stack: Stack) -> None:
    async with stack.client() as http:
        job_id = await submit(http, 'echo hello; echo "gpus=$CUDA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER"')
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"})
        assert job["state"] == "SUCCEEDED", job
        assert job["exit_code"] == 0
        [attempt] = job["attempts"]
        assert attempt["node_id"] == "local"
        assert attempt["state"] == "EXITED"
        assert attempt["exit_code"] == 0
        assert len(attempt["gpu_indices"]) == 1
        logs = (await http.get(f"/api/v1/jobs/{job_id}/logs")).text
        gpu = attempt["gpu_indices"][0]
        assert logs == f"hello\ngpus={gpu} order=PCI_BUS_ID\n"
        same_logs = await http.get(f"/api/v1/jobs/{job_id}/logs", params={"task": "main-0", "attempt": 1})
        assert same_logs.text == logs

    await asyncio.sleep(0.5)  # the last event's relay
    events = await lifecycle_events(stack.admin_nats(), job_id)
    # Job transitions arrive in order; the node's task reports interleave with them.
    assert [e for e in events if e.startswith("job.")] == [
        "job.submitted",
        "job.scheduled",
        "job.running",
        "job.succeeded",
    ]
    assert [e for e in events if e.startswith("task.")] == ["task.assigned", "task.started", "task.exited"]
    assert events.index("job.scheduled") < events.index("task.assigned")
    assert events.index("task.exited") < events.index("job.succeeded")


async def test_a_command_that_exits_3_fails_with_code_3_and_raises_an_alert(
    stack: Stack, database_url: str
) -> None:
    async with stack.client() as http:
        job_id = await submit(http, "echo about to fail; exit 3", name="fails")
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"})
    assert job["state"] == "FAILED"
    assert job["exit_code"] == 3
    assert job["reason"] == "task main-0 exited with code 3 (unknown)"
    assert job["attempts"][0]["classification"] == "unknown"
    assert job["attempts"][0]["exit_code"] == 3

    await asyncio.sleep(0.5)
    events = await lifecycle_events(stack.admin_nats(), job_id)
    assert events[0] == "job.submitted"
    assert events[-1] == "job.failed"
    assert events.index("job.running") < events.index("job.failed")

    conn = await asyncpg.connect(database_url)
    try:
        for _ in range(50):
            alert = await conn.fetchrow("SELECT rule, state, labels FROM alerter.alerts")
            if alert:
                break
            await asyncio.sleep(0.1)
    finally:
        await conn.close()
    assert alert is not None
    assert alert["rule"] == "JobFailed"
    assert alert["state"] == "firing"


async def test_jobs_queue_when_gpus_are_busy_and_run_when_they_free_up(stack: Stack) -> None:
    async with stack.client() as http:
        big = await submit(http, HOLD, gpus=6, name="big")
        await wait_state(http, big, {"RUNNING"})
        waiting = await submit(http, "echo my turn", gpus=4, name="waiting")
        # A job no node could ever hold is refused at once, not queued forever.
        too_wide = await http.post(
            "/api/v1/jobs",
            json={
                "name": "too-wide",
                "tasks": [{"name": "main", "command": "true", "resources": {"gpus": 16}}],
            },
        )
        assert too_wide.status_code == 422
        assert too_wide.json()["detail"].startswith(
            "a task asks for 16 GPUs on one node, but the largest node has 8"
        )
        await asyncio.sleep(1.0)
        pending = (await http.get(f"/api/v1/jobs/{waiting}")).json()
        assert pending["state"] == "PENDING"
        # Honest about why: the scheduler's reason, the queue position, in the API and the CLI.
        assert pending["pending"]["reason"] == "InsufficientGPUs"
        assert pending["pending"]["detail"] == "needs 4 GPUs; 2 are free on ready nodes"
        assert pending["pending"]["position"] == 1
        assert pending["pending"]["estimated_start"] is None  # "big" gave no max_runtime_s
        why = corral(stack, "why", waiting)
        assert why.returncode == 0, why.stderr
        headline, detail, place, expected = why.stdout.splitlines()
        assert headline == f"job {waiting} (waiting) is PENDING: InsufficientGPUs"
        assert detail == "  needs 4 GPUs; 2 are free on ready nodes"
        assert place.startswith("  position 1 in the queue; this reason since ")
        assert expected == "  no start estimate (the jobs it waits for set no max_runtime_s)"
        # Dry runs: where would a job go, and when? Nothing is stored.
        jobs_before = len((await http.get("/api/v1/jobs")).json()["items"])
        small = await http.post("/api/v1/jobs/dry-run", json=_one_task(2))
        assert small.status_code == 200, small.text
        fits = small.json()
        assert (fits["placeable_now"], fits["reason"], fits["borrowed"]) == (True, None, True)
        assert [len(p["gpu_indices"]) for p in fits["placements"]] == [2]
        queued = (await http.post("/api/v1/jobs/dry-run", json=_one_task(4))).json()
        assert (queued["placeable_now"], queued["reason"], queued["position"]) == (
            False,
            "Priority",  # "waiting", ahead of it, waits for the same 4 GPUs
            2,
        )
        assert queued["pending_jobs"] == 1
        never = await http.post("/api/v1/jobs/dry-run", json=_one_task(16))
        assert never.status_code == 422
        assert len((await http.get("/api/v1/jobs")).json()["items"]) == jobs_before
        stack.release(big)
        await wait_state(http, big, {"SUCCEEDED"})
        done = await wait_state(http, waiting, {"SUCCEEDED"})
    assert len(done["attempts"][0]["gpu_indices"]) == 4


def _one_task(gpus: int) -> dict[str, object]:
    return {"name": "probe", "tasks": [{"name": "main", "command": "true", "resources": {"gpus": gpus}}]}
