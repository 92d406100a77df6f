"""GPU sharing with real processes: ``CORRAL_GPU_SHARING=timeslice make up`` makes the
simulated GPUs shareable, two ``gpus: 0.5`` jobs then run side by side on one GPU index,
each seeing its share in its environment, and a whole-GPU job takes another GPU. A sharer
that uses more than its share (as the simulated GPUs' processes file says, standing in for
NVML) is stopped, its owner alerted. A node whose pool asks for a mode it has no tool for
refuses to start, saying why."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.e2e.stack import HOLD, Stack, submit_spec, wait_state

SHOW_SHARE = (
    'echo "devices=$CUDA_VISIBLE_DEVICES share=$CORRAL_GPU_SHARE memory=$CORRAL_GPU_MEMORY_MB"; ' + HOLD
)


@pytest.fixture
async def stack(database_url: str, nats_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    env = {
        "CORRAL_DATABASE_URL": database_url,
        "CORRAL_NATS_URL": nats_url,
        "CORRAL_GPU_SHARING": "timeslice",
        "CORRAL_SIMULATED_GPUS": "2",
    }
    async with Stack(tmp_path / "home", env).running() as running:
        yield running


def _spec(name: str, gpus: float) -> dict[str, object]:
    return {
        "name": name,
        "tasks": [{"name": "main", "command": SHOW_SHARE, "resources": {"gpus": gpus}}],
    }


async def test_two_halves_share_one_gpu_and_a_whole_job_takes_the_other(stack: Stack) -> None:
    async with stack.client() as http:
        halves = [await submit_spec(http, _spec(f"half-{n}", 0.5)) for n in range(2)]
        running = [await wait_state(http, job_id, {"RUNNING"}) for job_id in halves]
        [first], [second] = (job["attempts"] for job in running)
        assert first["node_id"] == second["node_id"]
        assert first["gpu_indices"] == second["gpu_indices"]
        assert len(first["gpu_indices"]) == 1
        shared_gpu = first["gpu_indices"][0]

        whole = await submit_spec(http, _spec("whole", 1))
        [attempt] = (await wait_state(http, whole, {"RUNNING"}))["attempts"]
        assert attempt["gpu_indices"] != [shared_gpu], "a whole-GPU job landed on a shared GPU"

        third = await submit_spec(http, _spec("half-2", 0.5))
        pending = await _reason(http, third)
        assert pending["reason"] == "InsufficientGPUs", pending
        assert "no shared GPU has that much room" in pending["detail"]

        for job_id in [*halves, whole]:
            stack.release(job_id)
            await wait_state(http, job_id, {"SUCCEEDED"})
        [attempt] = (await wait_state(http, third, {"RUNNING"}))["attempts"]
        stack.release(third)
        await wait_state(http, third, {"SUCCEEDED"})
        for job_id in halves:
            log = (await http.get(f"/api/v1/jobs/{job_id}/logs")).text
            assert "share=0.5 memory=40779" in log, log  # half of a simulated H100's 81,559 MiB


async def test_a_sharer_over_its_share_is_stopped_and_its_owner_alerted(
    stack: Stack, database_url: str
) -> None:
    async with stack.client() as http:
        job_id = await submit_spec(http, _spec("greedy", 0.5))
        [attempt] = (await wait_state(http, job_id, {"RUNNING"}))["attempts"]
        conn = await asyncpg.connect(database_url)
        try:
            recorded = await conn.fetchval("SELECT pid FROM launcher.attempts WHERE id = $1", attempt["id"])
            assert recorded, "the agent recorded the task's process"
            # A sandboxed task's processes are those of its cgroup (the recorded pid is its
            # sandbox helper's, outside it); an unsandboxed one's, its session's.
            pid = next(iter(_in_cgroup_of(attempt["id"])), recorded)
            # What NVML would say of a task that allocated 60,000 MiB of a half share of 81,559.
            processes = {"gpus": {str(attempt["gpu_indices"][0]): [{"pid": pid, "used_mb": 60000}]}}
            (stack.home / "gpu-processes.json").write_text(json.dumps(processes))
            job = await wait_state(http, job_id, {"FAILED"}, timeout_s=30)
            [ended] = job["attempts"]
            assert ended["classification"] == "permanent"
            assert "used 60000 MiB of GPU" in ended["reason"], ended
            assert "its share is 40779 MiB (0.5 of the GPU)" in ended["reason"], ended
            alert = None
            for _ in range(100):
                alert = await conn.fetchrow(
                    "SELECT rule, state, labels FROM alerter.alerts WHERE rule = 'GpuOverLimit'"
                )
                if alert:
                    break
                await asyncio.sleep(0.1)
        finally:
            await conn.close()
    assert alert is not None, "no GpuOverLimit alert"
    assert json.loads(alert["labels"])["action"] == "killed"


def _in_cgroup_of(attempt_id: str) -> list[int]:
    """The processes in a cgroup named after the attempt (a sandboxed task's)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cgroups = (entry / "cgroup").read_text()
            except OSError:
                continue
            if attempt_id in cgroups:
                pids.append(int(entry.name))
    return sorted(pids)


async def _reason(http: httpx.AsyncClient, job_id: str, timeout_s: float = 20.0) -> dict[str, Any]:
    """The job's pending reason once the scheduler has given one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
        assert job["state"] == "PENDING", job
        if job["pending"] is not None:
            pending: dict[str, Any] = job["pending"]
            return pending
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} was given no pending reason in {timeout_s} s")


def test_a_node_refuses_a_sharing_mode_it_has_no_tool_for(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "CORRAL_HOME": str(tmp_path),
        "CORRAL_EXPORTER_BACKEND": "simulated",
        "CORRAL_GPU_SHARING": "mps",
    }
    done = subprocess.run(
        [sys.executable, "-m", "services.monitor.exporter"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "GPU sharing mode mps: simulated GPUs have no MPS daemon" in done.stderr
    assert "CORRAL_GPU_SHARING=timeslice" in done.stderr
