"""MPI jobs end to end, through the API, on simulated nodes of real processes: a launcher
and two workers, each worker's sshd started by the platform, ``mpirun`` starting ranks
through them with the per-job key, ssh config and hostfile the platform wrote.

Needs Open MPI and OpenSSH's server (installed with apt by ``tests/system_packages.py``
when missing) and mpi4py (the dev extra)."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.local.ports import free_port
from tests.e2e.stack import Stack, submit_spec, wait_state
from tests.system_packages import ensure_mpi

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mpi"
RANK_LINE = re.compile(r"rank=(\d+) size=(\d+) sum=(\d+) host=\S+ task=(worker-\d)")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
async def two_nodes(database_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """Two simulated nodes of two GPUs: two workers of two GPUs each land one per node."""
    ensure_mpi()
    env = {
        "CORRAL_DATABASE_URL": database_url,
        "CORRAL_NATS_PORT": str(free_port()),
        "CORRAL_SIMULATED_NODES": "2",
        "CORRAL_SIMULATED_GPUS": "2",
    }
    async with Stack(tmp_path / "home", env).running() as stack:
        await stack.wait_nodes_ready(2)
        yield stack


def mpi_spec(launcher_command: str, *, workers: int = 2, gpus: int = 2, **extra: Any) -> dict[str, Any]:
    return {
        "name": "mpi-test",
        "framework": "mpi",
        "tasks": [
            {"name": "launcher", "command": launcher_command, "resources": {"cpus": 0.5, "memory_mb": 512}},
            {
                "name": "worker",
                "instances": workers,
                "resources": {"gpus": gpus, "cpus": 0.5, "memory_mb": 1024},
            },
        ],
        "max_runtime_s": 240,
        **extra,
    }


def allreduce_command(ranks: int) -> str:
    return f"mpirun -np {ranks} {shlex.quote(sys.executable)} {shlex.quote(str(EXAMPLE / 'allreduce.py'))}"


async def _log(http: httpx.AsyncClient, job_id: str, task: str) -> str:
    return (await http.get(f"/api/v1/jobs/{job_id}/logs", params={"task": task})).text


async def test_mpirun_allreduce_over_two_workers_gives_every_rank_the_same_sum(two_nodes: Stack) -> None:
    async with two_nodes.client() as http:
        job_id = await submit_spec(http, mpi_spec(allreduce_command(4)))
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"}, timeout_s=180)
        log = await _log(http, job_id, "launcher-0")
        workers = [await _log(http, job_id, f"worker-{i}") for i in (0, 1)]
        assert job["state"] == "SUCCEEDED", f"{job['reason']}\n{log}\n{workers}"
        ranks = {int(m.group(1)): m for m in RANK_LINE.finditer(log)}
        assert sorted(ranks) == [0, 1, 2, 3], log
        assert {m.group(2) for m in ranks.values()} == {"4"}
        assert {m.group(3) for m in ranks.values()} == {"10"}, "every rank has the same sum, 1+2+3+4"
        # Two slots per worker (two GPUs each): the ranks ran inside both workers' tasks.
        assert sorted(m.group(4) for m in ranks.values()) == ["worker-0", "worker-0", "worker-1", "worker-1"]
        nodes = {a["node_id"] for a in job["attempts"] if a["task_role"] == "worker"}
        assert len(nodes) == 2, f"the workers landed on one node: {job['attempts']}"


async def test_hostname_runs_on_every_slot_and_the_workers_stop_with_the_launcher(two_nodes: Stack) -> None:
    async with two_nodes.client() as http:
        job_id = await submit_spec(http, mpi_spec("mpirun -np 4 hostname && cat $CORRAL_HOSTFILE"))
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"}, timeout_s=120)
        log = await _log(http, job_id, "launcher-0")
        assert job["state"] == "SUCCEEDED", f"{job['reason']}\n{log}"
        assert log.count(socket.gethostname()) >= 4, log
        assert "worker-0 slots=2" in log, log
        assert "worker-1 slots=2" in log, log
    await _no_sshd_of(two_nodes)


async def test_killing_a_worker_fails_the_job_with_a_reason_and_leaves_no_sshd(two_nodes: Stack) -> None:
    async with two_nodes.client() as http:
        job_id = await submit_spec(http, mpi_spec("mpirun -np 4 sleep 600"))
        job = await wait_state(http, job_id, {"RUNNING"}, timeout_s=60)
        sshd = await _wait_sshd_of(two_nodes, 2)
        os.kill(sshd[0], signal.SIGKILL)
        job = await wait_state(http, job_id, {"FAILED", "SUCCEEDED"}, timeout_s=60)
        assert job["state"] == "FAILED", job
        assert job["reason"], job
        assert "worker" in job["reason"] or "mpirun" in job["reason"] or "signal" in job["reason"], job
    await _no_sshd_of(two_nodes)


def _sshd_pids(stack: Stack) -> list[int]:
    """The sshd processes started with a config under this stack's home."""
    found = subprocess.run(["pgrep", "-f", f"sshd .*{stack.home.resolve()}"], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


async def _wait_sshd_of(stack: Stack, count: int, timeout_s: float = 30) -> list[int]:
    for _ in range(int(timeout_s * 10)):
        pids = _sshd_pids(stack)
        if len(pids) >= count:
            return pids
        await asyncio.sleep(0.1)
    raise AssertionError(f"fewer than {count} workers' sshd started")


async def _no_sshd_of(stack: Stack, timeout_s: float = 20) -> None:
    for _ in range(int(timeout_s * 10)):
        if not _sshd_pids(stack):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"sshd left behind: {_sshd_pids(stack)}")
