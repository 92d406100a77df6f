"""Moves with real processes (services/scheduler/moves.py): two nodes of 8 GPUs, 4 free on
each; an 8-GPU job gets one node whole by moving the four 1-GPU jobs off it, and they
restart on the other node. The moved jobs keep their history, nothing is counted against
them, and every job ends once released."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.stack import HOLD, Stack, submit, wait_state


@pytest.fixture
async def stack(database_url: str, nats_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    # A job may be moved once it ran 1 s (300 s by default), so the test need not wait.
    env = {
        "CORRAL_DATABASE_URL": database_url,
        "CORRAL_NATS_URL": nats_url,
        "CORRAL_SCHEDULER_MIN_RUNTIME_S": "1",
    }
    async with Stack(tmp_path / "home", env).running() as running:
        yield running


async def test_small_jobs_move_so_that_a_gang_gets_a_whole_node(stack: Stack) -> None:
    other = stack.start_node("node-b")
    try:
        await stack.wait_nodes_ready(2)
        async with stack.client() as http:
            smalls = [await submit(http, HOLD, gpus=1, name=f"small-{i}") for i in range(12)]
            placed = {job_id: (await wait_state(http, job_id, {"RUNNING"})) for job_id in smalls}
            by_node: dict[str, list[str]] = {}
            for job_id, job in placed.items():
                by_node.setdefault(job["attempts"][0]["node_id"], []).append(job_id)
            assert sorted(len(jobs) for jobs in by_node.values()) == [4, 8], "best fit packs one node"
            full = next(node for node, jobs in by_node.items() if len(jobs) == 8)
            done = by_node[full][:4]
            for job_id in done:  # now 4 GPUs are free on each node
                stack.release(job_id)
                await wait_state(http, job_id, {"SUCCEEDED"})
            await asyncio.sleep(1.2)  # every small job has run its (1 s) minimum

            gang = await submit(http, HOLD, gpus=8, name="gang")
            running = await wait_state(http, gang, {"RUNNING"}, timeout_s=45)
            [attempt] = running["attempts"]
            assert len(attempt["gpu_indices"]) == 8

            moved = []
            for job_id in set(smalls) - set(done):
                job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
                if len(job["attempts"]) > 1 or job["attempts"][0]["stop_reason"]:
                    moved.append(job_id)
            assert len(moved) == 4, "the four small jobs of one node moved, no more"
            for job_id in moved:
                job = await wait_state(http, job_id, {"RUNNING"})
                first, second = sorted(job["attempts"], key=lambda a: a["attempt_no"])
                assert first["stop_reason"].startswith("preempted: moved to another node to make room")
                assert first["node_id"] == attempt["node_id"]
                assert second["node_id"] != attempt["node_id"], "restarted in the other node's holes"
                assert job["retries"] == 0, "being moved is not the job's fault"

            for job_id in [*smalls, gang]:
                stack.release(job_id)
            for job_id in [*smalls, gang]:
                assert (await wait_state(http, job_id, {"SUCCEEDED", "FAILED"}))["state"] == "SUCCEEDED"
    finally:
        for process in other:
            process.terminate()
            process.wait(10)
