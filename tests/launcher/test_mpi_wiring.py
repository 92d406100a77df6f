"""What the agent does for an MPI task before it spawns it (``ready_mpi_task``)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path
from typing import Any

from services.launcher.agent.environment import Peer, task_environment
from services.launcher.agent.mpi import ready_mpi_task
from services.launcher.agent.mpi.ssh_files import SshPaths
from services.launcher.agent.mpi.wiring import BARRIER_PLATFORM, sshd_binary
from services.launcher.agent.tasks import Task
from services.launcher.exit_codes import TaskEnd, classify
from shared.jobs import JobSpec
from tests.launcher.mpi_samples import JOB_ID, loopback_peers, mpi_spec, ssh_keys


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _task(role: str, index: int) -> Task:
    task = Task(f"att-{role}-{index}", job_id=JOB_ID, generation=1, role=role, index=index)
    return task


def _env(spec: JobSpec, role: str, index: int, peers: list[Peer]) -> dict[str, str]:
    return task_environment(
        spec,
        job_id=JOB_ID,
        role=role,
        task_index=index,
        attempt_id="att",
        attempt_no=1,
        gpu_indices=[],
        peers=peers,
    )


async def test_a_worker_gets_its_sshd_command_and_the_jobs_files(tmp_path: Path) -> None:
    spec, peers = mpi_spec(), loopback_peers([_free_port(), _free_port()])
    env = _env(spec, "worker", 1, peers)
    row = {"ssh_keys": ssh_keys(), "username": "alice", "gpu_indices": []}
    assert await ready_mpi_task(_task("worker", 1), spec, row, peers, env, tmp_path, None) is None
    paths = SshPaths(tmp_path / ".ssh")
    assert env["CORRAL_SSHD_COMMAND"] == f"{sshd_binary()} -D -e -f {paths.sshd_config('worker', 1)}"
    assert paths.sshd_config("worker", 1).is_file()
    assert not paths.sshd_config("worker", 0).exists()  # (that worker writes its own)
    assert paths.hostfile.read_text() == "worker-0 slots=1\nworker-1 slots=1\n"
    assert 'CORRAL_TASK_INDEX="1"' in paths.sshd_config("worker", 1).read_text()


async def test_keys_given_as_json_text_do_as_well(tmp_path: Path) -> None:
    spec, peers = mpi_spec(), loopback_peers([_free_port()])
    row = {"ssh_keys": json.dumps(ssh_keys()), "username": "alice", "gpu_indices": []}
    env = _env(spec, "worker", 0, peers)
    assert await ready_mpi_task(_task("worker", 0), spec, row, peers, env, tmp_path, None) is None


async def test_a_generation_without_keys_cannot_start(tmp_path: Path) -> None:
    spec, peers = mpi_spec(), loopback_peers([_free_port()])
    task = _task("worker", 0)
    row: dict[str, Any] = {"ssh_keys": None, "username": "alice", "gpu_indices": []}
    failed = await ready_mpi_task(task, spec, row, peers, _env(spec, "worker", 0, peers), tmp_path, None)
    assert failed is not None
    assert "ssh keys" in (failed.reason or "")
    assert task.platform == "start_failed"


async def test_a_generic_job_is_left_alone(tmp_path: Path) -> None:
    spec = JobSpec.model_validate({"name": "x", "tasks": [{"name": "main", "instances": 1, "command": "x"}]})
    env = {"A": "1"}
    assert await ready_mpi_task(_task("main", 0), spec, {}, [], env, tmp_path, None) is None
    assert env == {"A": "1"}
    assert not (tmp_path / ".ssh").exists()


async def test_the_launchers_start_fails_when_a_worker_never_answers(tmp_path: Path) -> None:
    spec = mpi_spec(mpi={"barrier_timeout_s": 1})
    down = _free_port()
    peers = loopback_peers([down])
    task = _task("launcher", 0)
    row = {"ssh_keys": ssh_keys(), "username": "alice", "gpu_indices": []}
    env = _env(spec, "launcher", 0, peers)
    failed = await ready_mpi_task(task, spec, row, peers, env, tmp_path, None)
    assert failed is not None
    assert failed.reason == (
        f"ssh barrier: worker-0 (127.0.0.1:{down}) did not answer within 1 s; check that worker's log"
    )
    assert task.platform == BARRIER_PLATFORM
    assert classify(TaskEnd(None, None, task.platform)).classification == "unknown"
    assert not (tmp_path / ".ssh").exists()  # (nothing is written for a launcher that does not start)


async def test_a_stop_while_the_launcher_waits_ends_the_wait(tmp_path: Path) -> None:
    # The launcher then starts and is stopped at once, as any task stopped while starting.
    spec = mpi_spec(mpi={"barrier_timeout_s": 60})
    peers = loopback_peers([_free_port()])
    task = _task("launcher", 0)
    row = {"ssh_keys": ssh_keys(), "username": "alice", "gpu_indices": []}

    async def stop_soon() -> None:
        await asyncio.sleep(0.3)
        task.stop_reason = "cancelled by alice"

    stopping = asyncio.create_task(stop_soon())
    begun = time.monotonic()
    assert (
        await ready_mpi_task(task, spec, row, peers, _env(spec, "launcher", 0, peers), tmp_path, None) is None
    )
    assert time.monotonic() - begun < 2
    assert task.platform is None
    await stopping
