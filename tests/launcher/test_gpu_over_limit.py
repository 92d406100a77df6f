"""The node agent's check that tasks holding a share of a GPU keep to it, on real
Postgres with real processes.

The GPU's processes come from the scripted processes file (``ScriptedProcesses``), the
labelled stand-in for NVML on a machine without GPUs: the test writes which pid uses
how much of GPU 0's memory, naming real processes of real tasks the agent started, and
the agent maps them to tasks as it would NVML's answer (cgroups; unsandboxed, sessions).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import pytest
from prometheus_client import REGISTRY

from services.api.jobs.repository import JobRepository
from services.launcher.agent.adoption import unwatched_task
from services.launcher.agent.agent import SOURCE, NodeAgent
from services.launcher.agent.gpu_share.processes import ScriptedProcesses
from services.launcher.agent.gpu_share.shares import GpuShares
from services.launcher.agent.gpu_share.watch import GpuShareWatch
from services.launcher.agent.repository import NodeRepository
from services.launcher.agent.sandbox.cgroups import TaskCgroup
from services.launcher.agent.sandbox.sandbox import Sandbox
from shared.db.pool import Database
from shared.events import TaskOverLimit, parse_event
from shared.gpu_sharing import GpuSharingSettings
from shared.ids import new_attempt_id, new_job_id
from shared.jobs import JobSpec
from tests.launcher import attempts

NODE = "gpu-share-1"
MEMORY_MB = 81559  # the scripted GPU's, an H100's: a 0.5 share is 40779 MiB
HALF = 40779
# The task's process says its pid (a child of the agent's wrapper, in the task's session).
WRITES_ITS_PID = (
    "python3 -c \"import os, time; open('gpu.pid', 'w').write(str(os.getpid())); time.sleep(600)\""
)


async def share_attempt(
    db: Database, command: str, *, gpus: float = 0.5, gpu_memory_mb: int | None = None
) -> tuple[str, str]:
    """A job of one task holding ``gpus`` of GPU 0 on NODE, its attempt ASSIGNED; (job, attempt)."""
    resources: dict[str, Any] = {"gpus": gpus, "cpus": 1, "memory_mb": 256}
    if gpu_memory_mb is not None:
        resources["gpu_memory_mb"] = gpu_memory_mb
    spec = JobSpec.model_validate(
        {
            "name": "share",
            "tasks": [{"name": "main", "instances": 1, "command": command, "resources": resources}],
        }
    )
    job_id, attempt_id = new_job_id(), new_attempt_id()
    await db.execute(
        "INSERT INTO api.jobs (id, name, username, virtual_cluster, spec, total_gpus, state, generation)"
        " VALUES ($1, 'share', 'alice', 'default', $2, 1, 'SCHEDULED', 1)",
        job_id,
        spec.model_dump(mode="json", exclude_none=True),
    )
    await db.execute(
        "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no, node_id,"
        " gpu_indices, state) VALUES ($1, $2, 1, 'main', 0, 1, $3, '{0}', 'ASSIGNED')",
        attempt_id,
        job_id,
        NODE,
    )
    return job_id, attempt_id


class Gpu0:
    """The scripted processes file, as the test says GPU 0's processes are."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def uses(self, *processes: tuple[int, int]) -> None:
        listed = [{"pid": pid, "used_mb": used_mb} for pid, used_mb in processes]
        self.path.write_text(json.dumps({"memory_total_mb": MEMORY_MB, "gpus": {"0": listed}}))


@asynccontextmanager
async def sharing_agent(
    db: Database, tmp_path: Path, over_limit: Literal["kill", "warn"], sandbox: Sandbox | None = None
) -> AsyncIterator[tuple[NodeAgent, GpuShareWatch]]:
    """A node agent on a node that time-slices its GPUs, reading the scripted processes
    file, and its check (called by the test, not on a timer); every task it still runs
    is killed at the end."""
    await attempts.known_nodes(db, NODE)
    settings = GpuSharingSettings(
        CORRAL_GPU_SHARING="timeslice", over_limit=over_limit, processes_file=tmp_path / "gpu-processes.json"
    )
    shares = GpuShares(settings, ScriptedProcesses(tmp_path / "gpu-processes.json"))
    async with asyncio.TaskGroup() as tg:
        agent = NodeAgent(
            db,
            tg,
            node_id=NODE,
            log_dir=tmp_path / "logs",
            state_dir=tmp_path / "state",
            work_dir=tmp_path / "work",
            stop_grace_s=2.0,
            sandbox=sandbox,
            shares=shares,
        )
        await agent.register(lease_s=30)
        records = NodeRepository(db, NODE, None)
        watch = GpuShareWatch(
            shares,
            records.report_over_limit,
            agent.stop,
            node_id=NODE,
            source=SOURCE,
            grace_s=2.0,
            record_use=records.record_gpu_use,
        )
        yield agent, watch
        agent.fence_all("the test ended")


async def until(check: Callable[[], Awaitable[Any]], what: str, timeout_s: float = 10.0) -> Any:
    for _ in range(int(timeout_s / 0.05)):
        if found := await check():
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout_s} s")


async def pid_written(work_dir: Path) -> int:
    async def read() -> int | None:
        text = (work_dir / "gpu.pid").read_text() if (work_dir / "gpu.pid").exists() else ""
        return int(text) if text else None

    return int(await until(read, "the task to say its pid"))


async def over_limit_events(db: Database) -> list[TaskOverLimit]:
    rows = await db.fetch(
        "SELECT payload FROM corral.outbox WHERE subject LIKE 'corral.task.over_limit.%' ORDER BY id"
    )
    events = [parse_event(bytes(row["payload"])) for row in rows]
    assert all(isinstance(e, TaskOverLimit) for e in events)
    return events  # type: ignore[return-value]


async def attempt_end(db: Database, attempt_id: str) -> Any:
    async def ended() -> Any:
        row = await db.fetchrow(
            "SELECT state, reason, classification FROM launcher.attempts WHERE id = $1", attempt_id
        )
        return row if row is not None and row["state"] == "EXITED" else None

    return await until(ended, "the attempt's end")


def gauge(name: str, job_id: str, attempt_id: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"job": job_id, "attempt": attempt_id, "gpu": "0"})


async def test_a_task_over_its_share_is_told_of_and_stopped(db: Database, tmp_path: Path) -> None:
    job_id, attempt_id = await share_attempt(db, WRITES_ITS_PID)
    gpu = Gpu0(tmp_path / "gpu-processes.json")
    async with sharing_agent(db, tmp_path, "kill") as (agent, watch):
        await agent.start_attempt(attempt_id)
        task = agent.task(attempt_id)
        assert task is not None
        assert task.gpu_indices == (0,)
        pid = await pid_written(tmp_path / "work" / job_id)
        gpu.uses((pid, 30000))
        await watch.check()  # within its share: nothing to tell
        assert await over_limit_events(db) == []
        assert gauge("corral_agent_gpu_share_used_bytes", job_id, attempt_id) == 30000 * 1024 * 1024
        assert gauge("corral_agent_gpu_share_limit_bytes", job_id, attempt_id) == HALF * 1024 * 1024

        gpu.uses((pid, 50000))
        await watch.check()
        await watch.check()  # (once per attempt)
        end = await attempt_end(db, attempt_id)
        [event] = await over_limit_events(db)
        assert event.nats_subject == f"corral.task.over_limit.{NODE}"
        assert event.data.model_dump() == {
            "attempt_id": attempt_id,
            "job_id": job_id,
            "node_id": NODE,
            "gpu_index": 0,
            "used_mb": 50000,
            "limit_mb": HALF,
            "action": "killed",
        }
        assert end["classification"] == "permanent"
        assert end["reason"] == (
            f"used 50000 MiB of GPU 0, its share is {HALF} MiB (0.5 of the GPU): "
            "ask for a larger share (resources.gpus, resources.gpu_memory_mb) or use less"
        )
        await until(lambda: _no_sharers(watch, agent), "the sharer to be forgotten")
        assert gauge("corral_agent_gpu_share_used_bytes", job_id, attempt_id) is None  # gone with it


async def _no_sharers(watch: GpuShareWatch, agent: NodeAgent) -> bool:
    await watch.check()
    return not agent.shares.sharers


async def test_warn_only_tells_and_the_task_runs_on(db: Database, tmp_path: Path) -> None:
    job_id, attempt_id = await share_attempt(db, WRITES_ITS_PID)
    gpu = Gpu0(tmp_path / "gpu-processes.json")
    async with sharing_agent(db, tmp_path, "warn") as (agent, watch):
        await agent.start_attempt(attempt_id)
        gpu.uses((await pid_written(tmp_path / "work" / job_id), 60000))
        for _ in range(3):
            await watch.check()
        [event] = await over_limit_events(db)
        assert (event.data.used_mb, event.data.action) == (60000, "warned")
        await asyncio.sleep(0.5)
        task = agent.task(attempt_id)
        assert task is not None
        assert not task.ended
        assert not task.signalled
        assert await db.fetchval("SELECT state FROM launcher.attempts WHERE id = $1", attempt_id) == "RUNNING"


async def test_each_task_is_charged_its_own_processes_only(db: Database, tmp_path: Path) -> None:
    """Two sharers of GPU 0 and a process of no task: each is measured alone, and
    together they use more than either share without anyone being over."""
    first_job, first = await share_attempt(db, WRITES_ITS_PID)
    second_job, second = await share_attempt(db, WRITES_ITS_PID)
    gpu = Gpu0(tmp_path / "gpu-processes.json")
    async with sharing_agent(db, tmp_path, "kill") as (agent, watch):
        await agent.start_attempt(first)
        await agent.start_attempt(second)
        first_pid = await pid_written(tmp_path / "work" / first_job)
        second_pid = await pid_written(tmp_path / "work" / second_job)
        stranger = os.getpid()  # this test's own process: in no task's session
        gpu.uses((first_pid, 30000), (second_pid, 35000), (stranger, 70000))
        await watch.check()
        assert await over_limit_events(db) == []
        assert gauge("corral_agent_gpu_share_used_bytes", first_job, first) == 30000 * 1024 * 1024
        assert gauge("corral_agent_gpu_share_used_bytes", second_job, second) == 35000 * 1024 * 1024

        gpu.uses((first_pid, 30000), (second_pid, 45000), (stranger, 70000))
        await watch.check()
        [event] = await over_limit_events(db)
        assert (event.data.attempt_id, event.data.used_mb) == (second, 45000)
        await attempt_end(db, second)
        task = agent.task(first)
        assert task is not None
        assert not task.signalled  # the other sharer runs on


async def test_each_sharers_use_is_recorded_on_its_attempt_when_it_moves(
    db: Database, tmp_path: Path
) -> None:
    job_id, attempt_id = await share_attempt(db, WRITES_ITS_PID)
    gpu = Gpu0(tmp_path / "gpu-processes.json")

    async def recorded() -> tuple[int | None, object]:
        row = await db.fetchrow(
            "SELECT gpu_memory_used_mb, gpu_memory_read_at FROM launcher.attempts WHERE id = $1", attempt_id
        )
        assert row is not None
        return row["gpu_memory_used_mb"], row["gpu_memory_read_at"]

    async with sharing_agent(db, tmp_path, "warn") as (agent, watch):
        await agent.start_attempt(attempt_id)
        pid = await pid_written(tmp_path / "work" / job_id)
        assert (await recorded())[0] is None  # never read yet
        gpu.uses((pid, 12000))
        await watch.check()
        used, first_read = await recorded()
        assert used == 12000
        gpu.uses((pid, 12040))  # moved by less than 64 MiB: the row is left as it is
        await watch.check()
        assert await recorded() == (12000, first_read)
        gpu.uses((pid, 20000))
        await watch.check()
        assert (await recorded())[0] == 20000
        [attempt] = await JobRepository(db).attempts_of_job(job_id)  # what the API and the portal read
        assert attempt.gpu_memory_used_mb == 20000


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")
async def test_a_sandboxed_task_is_its_cgroups_processes(
    db: Database, tmp_path: Path, sandbox: Sandbox
) -> None:
    """Counted by its cgroup, and a share of memory asked for by size is that size."""
    job_id, attempt_id = await share_attempt(db, "sleep 600", gpus=0.25, gpu_memory_mb=20000)
    gpu = Gpu0(tmp_path / "gpu-processes.json")
    async with sharing_agent(db, tmp_path, "kill", sandbox) as (agent, watch):
        await agent.start_attempt(attempt_id)
        task = agent.task(attempt_id)
        assert task is not None
        cgroup = task.cgroup
        assert cgroup is not None
        pids = await until(lambda: _processes_of(cgroup), "the task's processes")
        gpu.uses(*((pid, 4000) for pid in pids), (os.getpid(), 70000))
        await watch.check()
        used = gauge("corral_agent_gpu_share_used_bytes", job_id, attempt_id)
        assert used == 4000 * len(pids) * 1024 * 1024 <= 20000 * 1024 * 1024
        assert gauge("corral_agent_gpu_share_limit_bytes", job_id, attempt_id) == 20000 * 1024 * 1024
        gpu.uses((pids[-1], 25000))
        await watch.check()
        end = await attempt_end(db, attempt_id)
        assert end["classification"] == "permanent"
        assert end["reason"].startswith("used 25000 MiB of GPU 0, its share is 20000 MiB (its gpu_memory_mb)")
        [event] = await over_limit_events(db)
        assert (event.data.limit_mb, event.data.action) == (20000, "killed")


async def _processes_of(cgroup: TaskCgroup) -> list[int]:
    return cgroup.processes()


async def test_a_readopted_task_keeps_its_gpu(db: Database, tmp_path: Path) -> None:
    """A restarted agent knows the GPU of a task it re-adopts (its share is checked too)."""
    _, attempt_id = await share_attempt(db, "sleep 600")
    await db.execute("UPDATE launcher.attempts SET state = 'RUNNING', pid = 1 WHERE id = $1", attempt_id)
    [row] = await NodeRepository(db, NODE, None).live_attempts()
    task = unwatched_task(row, JobSpec.model_validate(row["spec"]), tmp_path / "state", tmp_path / "work")
    assert task.gpu_indices == (0,)
