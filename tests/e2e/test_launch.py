"""Launching for real: distributed environment, gang stop, cancel, retries, max runtime."""

from __future__ import annotations

import asyncio
import time

import asyncpg

from services.scheduler.preemption import request_preemption
from shared.db.pool import init_connection
from tests.e2e.stack import HOLD, Stack, submit, submit_spec, wait_state
from tests.e2e.test_first_job import lifecycle_events

ENDS = {"SUCCEEDED", "FAILED", "CANCELLED"}
# Says when it is asked to stop, then keeps running until SIGKILL would be needed... or not.
TRAPS_TERM = "trap 'echo got SIGTERM; exit 143' TERM; echo started; while true; do sleep 0.05; done"


async def test_a_gang_gets_the_rendezvous_environment(stack: Stack) -> None:
    show = (
        'echo "rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE node=$NODE_RANK '
        'master=$MASTER_ADDR:$MASTER_PORT role=$PAI_CURRENT_TASK_ROLE_NAME http=$PAI_PORT_LIST_worker_1_http"'
    )
    spec = {
        "name": "gang",
        "tasks": [
            {
                "name": "worker",
                "instances": 2,
                "command": show,
                "resources": {"gpus": 1},
                "ports": {"http": 1},
            }
        ],
    }
    async with stack.client() as http:
        job_id = await submit_spec(http, spec)
        job = await wait_state(http, job_id, ENDS)
        assert job["state"] == "SUCCEEDED", job
        lines = {}
        for index in (0, 1):
            lines[index] = (
                await http.get(f"/api/v1/jobs/{job_id}/logs", params={"task": f"worker-{index}"})
            ).text
    by_index = {a["task_index"]: a for a in job["attempts"]}
    master_port = by_index[0]["ports"]["master"][0]
    http_port = by_index[1]["ports"]["http"][0]
    assert (
        lines[0]
        == f"rank=0 world=2 local=0/2 node=0 master=127.0.0.1:{master_port} role=worker http={http_port}\n"
    )
    assert (
        lines[1]
        == f"rank=1 world=2 local=1/2 node=0 master=127.0.0.1:{master_port} role=worker http={http_port}\n"
    )
    assert set(by_index[0]["gpu_indices"]).isdisjoint(by_index[1]["gpu_indices"])


async def test_the_first_failure_stops_the_rest_of_the_gang(stack: Stack) -> None:
    command = f'if [ "$CORRAL_TASK_INDEX" = 0 ]; then sleep 0.3; exit 4; fi; {TRAPS_TERM}'
    spec = {
        "name": "gang",
        "tasks": [{"name": "worker", "instances": 2, "command": command, "resources": {"gpus": 1}}],
    }
    async with stack.client() as http:
        job_id = await submit_spec(http, spec)
        job = await wait_state(http, job_id, ENDS)
        survivor_log = (await http.get(f"/api/v1/jobs/{job_id}/logs", params={"task": "worker-1"})).text
    assert job["state"] == "FAILED"
    assert job["exit_code"] == 4
    assert job["reason"] == "task worker-0 exited with code 4 (unknown)"
    stopped = next(a for a in job["attempts"] if a["task_index"] == 1)
    assert stopped["stop_reason"].startswith(
        "stopping the rest of the gang: task worker-0 exited with code 4"
    )
    assert stopped["exit_code"] == 143
    # (The shell may also report that its `sleep` was terminated: the whole group is signalled.)
    assert survivor_log.startswith("started\n")
    assert survivor_log.endswith("got SIGTERM\n")


async def test_cancel_stops_a_running_job(stack: Stack) -> None:
    async with stack.client() as http:
        job_id = await submit(http, TRAPS_TERM)
        await wait_state(http, job_id, {"RUNNING"})
        await asyncio.sleep(0.3)
        started = time.monotonic()
        response = await http.post(f"/api/v1/jobs/{job_id}/cancel")
        assert response.status_code == 200
        assert response.json()["cancel_requested_at"] is not None
        job = await wait_state(http, job_id, ENDS)
        elapsed = time.monotonic() - started
        assert job["state"] == "CANCELLED"
        log = (await http.get(f"/api/v1/jobs/{job_id}/logs")).text
        assert log.startswith("started\n")
        assert log.endswith("got SIGTERM\n")
        assert job["attempts"][0]["stop_reason"] == "job cancelled"
        assert elapsed < 5
        again = await http.post(f"/api/v1/jobs/{job_id}/cancel")
        assert again.status_code == 409
        assert "already ended CANCELLED" in again.json()["detail"]


async def test_cancel_of_a_pending_job_is_immediate(stack: Stack) -> None:
    async with stack.client() as http:
        blocker = await submit(http, HOLD, gpus=8, name="blocker")
        await wait_state(http, blocker, {"RUNNING"})
        waiting = await submit(http, "echo never", name="waiting")
        response = await http.post(f"/api/v1/jobs/{waiting}/cancel")
        assert response.json()["state"] == "CANCELLED"
        assert "before it was scheduled" in response.json()["reason"]
        stack.release(blocker)
        await wait_state(http, blocker, {"SUCCEEDED"})
        assert (await http.get(f"/api/v1/jobs/{waiting}")).json()["attempts"] == []
        assert (await http.post("/api/v1/jobs/job-missing/cancel")).status_code == 404


async def test_unknown_failures_are_retried_up_to_the_limit(stack: Stack) -> None:
    async with stack.client() as http:
        job_id = await submit(
            http, "echo try $CORRAL_ATTEMPT; exit 3", retry={"max_retries": 2, "backoff_s": 0.2}
        )
        job = await wait_state(http, job_id, ENDS, timeout_s=60)
        last_log = (await http.get(f"/api/v1/jobs/{job_id}/logs")).text
    assert job["state"] == "FAILED"
    assert job["retries"] == 2
    assert [a["attempt_no"] for a in job["attempts"]] == [1, 2, 3]
    assert all(a["classification"] == "unknown" for a in job["attempts"])
    assert "gave up after 2 retries" in job["reason"]
    assert last_log == "try 3\n"


async def test_transient_failures_are_retried_without_counting(stack: Stack) -> None:
    flaky = "if [ -f tried ]; then echo recovered; else touch tried; exit 75; fi"
    async with stack.client() as http:
        job_id = await submit(http, flaky, retry={"backoff_s": 0.1})
        job = await wait_state(http, job_id, ENDS, timeout_s=60)
    assert job["state"] == "SUCCEEDED"
    assert job["retries"] == 0
    assert [a["classification"] for a in job["attempts"]] == ["transient", None] or [
        a["classification"] for a in job["attempts"]
    ] == ["transient", "unknown"]


async def test_permanent_failures_are_never_retried(stack: Stack) -> None:
    async with stack.client() as http:
        job_id = await submit(http, "no-such-command-anywhere", retry={"max_retries": 5, "backoff_s": 0})
        job = await wait_state(http, job_id, ENDS)
    assert job["state"] == "FAILED"
    assert job["exit_code"] == 127
    assert len(job["attempts"]) == 1
    assert job["attempts"][0]["classification"] == "permanent"
    assert job["reason"] == "task main-0 exited with code 127: command not found (permanent)"


async def test_max_runtime_is_enforced(stack: Stack) -> None:
    async with stack.client() as http:
        started = time.monotonic()
        job_id = await submit(http, "sleep 60", max_runtime_s=1)
        job = await wait_state(http, job_id, ENDS, timeout_s=20)
    assert job["state"] == "FAILED"
    assert time.monotonic() - started < 10
    [attempt] = job["attempts"]
    assert attempt["classification"] == "permanent"
    assert "max_runtime_s=1" in attempt["reason"]


async def test_logs_can_be_followed_while_the_task_runs_and_survive_it(stack: Stack) -> None:
    async with stack.client() as http:
        job_id = await submit(http, f"echo first; {HOLD}")
        await wait_state(http, job_id, {"RUNNING"})
        received = ""
        released = False
        async with http.stream("GET", f"/api/v1/jobs/{job_id}/logs", params={"follow": "true"}) as response:
            assert response.status_code == 200
            async for chunk in response.aiter_text():
                received += chunk
                if "first" in received and not released:
                    # The stream is open and has delivered the first line while the task
                    # still runs; now let the task finish, and the stream must end by itself.
                    stack.release(job_id)
                    released = True
        assert received == "first\nreleased\n"
        job = await wait_state(http, job_id, ENDS)
        assert job["state"] == "SUCCEEDED"
        after = await http.get(f"/api/v1/jobs/{job_id}/logs", params={"task": "main-0", "attempt": 1})
        assert after.text == "first\nreleased\n"


async def test_a_preempted_job_stops_with_its_grace_period_and_is_requeued_uncounted(
    stack: Stack, database_url: str
) -> None:
    # The decision is the scheduler's (its policy picks victims: victims.py);
    # here it is taken through the scheduler's own function, and the rest is real.
    command = f"trap 'echo got SIGTERM; exit 143' TERM; echo \"attempt $CORRAL_ATTEMPT\"; {HOLD}"
    async with stack.client() as http:
        job_id = await submit(http, command)
        await wait_state(http, job_id, {"RUNNING"})
        conn = await asyncpg.connect(database_url)
        await init_connection(conn)
        try:
            async with conn.transaction():
                assert await request_preemption(conn, job_id, "a higher-priority job needs the GPU")
        finally:
            await conn.close()
        for _ in range(300):
            job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
            if len(job["attempts"]) == 2 and job["state"] == "RUNNING":
                break
            await asyncio.sleep(0.1)
        first, second = sorted(job["attempts"], key=lambda a: a["attempt_no"])
        assert first["stop_reason"] == "preempted: a higher-priority job needs the GPU"
        assert first["exit_code"] == 143, "stopped with SIGTERM and its grace period"
        assert first["classification"] == "transient"
        assert job["retries"] == 0, "a preemption is not the job's fault"
        first_log = (
            await http.get(f"/api/v1/jobs/{job_id}/logs", params={"task": "main-0", "attempt": 1})
        ).text
        assert first_log.startswith("attempt 1\n")
        assert first_log.endswith("got SIGTERM\n")
        stack.release(job_id)
        job = await wait_state(http, job_id, ENDS)
        assert job["state"] == "SUCCEEDED"
        assert second["state"] in ("RUNNING", "EXITED")
    await asyncio.sleep(0.5)
    events = await lifecycle_events(stack.admin_nats(), job_id)
    assert [e for e in events if e.startswith("job.")] == [
        "job.submitted",
        "job.scheduled",
        "job.running",
        "job.preempt_requested",
        "job.preempted",
        "job.scheduled",
        "job.running",
        "job.succeeded",
    ]
