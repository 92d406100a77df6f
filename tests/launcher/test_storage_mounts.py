"""A task's storage on its node, on real Postgres with real processes: the agent reads
the configs its attempt's job uses (and only those, only while it starts), narrows them
to read-only as the job asks, fails the start with a reason when it cannot give the task
what it asked for, and a sandboxed task writes through its storage onto the host.

NFS cannot be mounted here (no server, no mount.nfs): its command is checked as built,
and a mount that fails is shown to fail the start with the mount's own words.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.launcher.agent.agent import NodeAgent
from services.launcher.agent.repository import NodeRepository
from services.launcher.agent.sandbox.sandbox import Sandbox
from services.launcher.agent.sandbox.storage import Bind
from services.launcher.agent.storage_mounts import (
    MountProblem,
    mount_nfs_once,
    nfs_mount_argv,
    nfs_mount_point,
    task_mounts,
)
from services.launcher.agent.tasks import Task
from shared.db.pool import Database
from shared.ids import new_attempt_id
from shared.jobs import JobSpec
from tests.launcher import attempts

NODE = "gpu-3"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")


@pytest.fixture
def host_dirs() -> Iterator[Path]:
    """Two hostpath storages under a root of root's alone, outside /tmp."""
    root = Path(tempfile.mkdtemp(prefix="corral-storage-", dir="/var/lib"))
    root.chmod(0o700)
    for name in ("data", "models"):
        (root / name).mkdir()
        (root / name).chmod(0o777)
    yield root
    shutil.rmtree(root, ignore_errors=True)


async def _config(
    db: Database, name: str, source: str, read_only: bool = False, kind: str = "hostpath"
) -> None:
    await db.execute(
        "INSERT INTO api.storage_configs (name, kind, source, read_only, all_users, created_by, updated_by)"
        " VALUES ($1, $2, $3, $4, true, 'admin', 'admin')",
        name,
        kind,
        source,
        read_only,
    )


async def _starting(
    db: Database, command: str, storage: list[dict[str, object]], **role: object
) -> tuple[str, JobSpec]:
    """A job using ``storage``, submitted, and its one attempt on NODE, ASSIGNED."""
    spec = JobSpec.model_validate(
        {
            "name": "train",
            "storage": storage,
            "tasks": [
                {"name": "main", "command": command, "resources": {"gpus": 0, "memory_mb": 256}, **role}
            ],
        }
    )
    job_id = (await Submitter(JobRepository(db)).submit(spec, "alice", None)).job.id
    await db.execute("UPDATE api.jobs SET state = 'SCHEDULED', generation = 1 WHERE id = $1", job_id)
    attempt_id = new_attempt_id()
    await db.execute(
        "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no,"
        " node_id, gpu_indices, state, ports) VALUES ($1, $2, 1, 'main', 0, 1, $3, '{}', 'ASSIGNED', '{}')",
        attempt_id,
        job_id,
        NODE,
    )
    return attempt_id, spec


async def _ended(db: Database, attempt_id: str) -> dict[str, object]:
    for _ in range(400):
        row = await db.fetchrow(
            "SELECT state, exit_code, classification, reason FROM launcher.attempts WHERE id = $1",
            attempt_id,
        )
        assert row is not None
        if row["state"] == "EXITED":
            return dict(row)
        await asyncio.sleep(0.05)
    raise AssertionError(f"attempt {attempt_id} did not end within 20 s")


@root_only
async def test_the_node_reads_only_its_starting_tasks_storage_narrowed_as_the_job_asks(
    db: Database, tmp_path: Path, host_dirs: Path, sandbox: Sandbox
) -> None:
    await attempts.known_nodes(db, NODE)
    await _config(db, "data", str(host_dirs / "data"))
    await _config(db, "models", str(host_dirs / "models"), read_only=True)
    await _config(db, "unused", "/srv/other-teams")
    attempt_id, spec = await _starting(
        db, "true", [{"name": "data", "read_only": True}, {"name": "models"}], shm_mb=64
    )
    node = NodeRepository(db, NODE, None)
    assert await node.attempt_storage(attempt_id) == [], "nothing before the attempt starts"
    await db.execute("UPDATE launcher.attempts SET state = 'STARTING' WHERE id = $1", attempt_id)
    assert [r["name"] for r in await node.attempt_storage(attempt_id)] == ["data", "models"]

    mounts = await task_mounts(node, Task(attempt_id), spec, spec.tasks[0], sandbox, tmp_path / "state")
    assert mounts.binds == (
        Bind(host_dirs / "data", "/mnt/data", read_only=True),  # the job narrowed it
        Bind(host_dirs / "models", "/mnt/models", read_only=True),  # the config says so
    )
    assert mounts.shm_mb == 64

    await db.execute("DELETE FROM api.storage_configs WHERE name = 'models'")
    with pytest.raises(MountProblem, match="storage 'models' has no config any more"):
        await task_mounts(node, Task(attempt_id), spec, spec.tasks[0], sandbox, tmp_path / "state")
    await db.execute("UPDATE api.storage_configs SET source = '/var/lib/no-such-dir' WHERE name = 'data'")
    with pytest.raises(MountProblem, match="/var/lib/no-such-dir is not a directory on this node"):
        await task_mounts(node, Task(attempt_id), spec, spec.tasks[0], sandbox, tmp_path / "state")


async def test_without_a_sandbox_a_task_with_storage_or_shm_fails_to_start(
    db: Database, tmp_path: Path
) -> None:
    await attempts.known_nodes(db, NODE)
    await _config(db, "data", "/srv/data")
    with_storage, _ = await _starting(db, "touch ran-anyway", [{"name": "data"}])
    with_shm, _ = await _starting(db, "touch ran-anyway", [], shm_mb=64)
    async with asyncio.TaskGroup() as tg:
        agent = NodeAgent(
            db,
            tg,
            node_id=NODE,
            log_dir=tmp_path / "logs",
            state_dir=tmp_path / "state",
            work_dir=tmp_path / "work",
        )
        await agent.register(lease_s=30)
        await agent.start_attempt(with_storage)
        await agent.start_attempt(with_shm)
        ended = [await _ended(db, with_storage), await _ended(db, with_shm)]
    for end, asked in zip(ended, ("storage", "a /dev/shm size (shm_mb)"), strict=True):
        assert end["reason"] == (
            f"could not start the task: the job asks for {asked}, which only a sandboxed node provides, and"
            " this node runs tasks without a sandbox (isolation: none); run its agent as root, with cgroups"
        )
        assert (end["exit_code"], end["classification"]) == (None, "permanent"), end  # start_failed
    assert not list((tmp_path / "work").rglob("ran-anyway"))


@root_only
async def test_a_sandboxed_task_writes_on_its_storage(
    db: Database, tmp_path: Path, host_dirs: Path, sandbox: Sandbox
) -> None:
    await attempts.known_nodes(db, NODE)
    await _config(db, "data", str(host_dirs / "data"))
    attempt_id, _ = await _starting(
        db, "echo weights > /mnt/data/model.pt && df -m /dev/shm | tail -1", [{"name": "data"}], shm_mb=32
    )
    async with asyncio.TaskGroup() as tg:
        agent = NodeAgent(
            db,
            tg,
            node_id=NODE,
            log_dir=tmp_path / "logs",
            state_dir=tmp_path / "state",
            work_dir=tmp_path / "work",
            sandbox=sandbox,
        )
        await agent.register(lease_s=30)
        await agent.start_attempt(attempt_id)
        ended = await _ended(db, attempt_id)
    assert ended["exit_code"] == 0, ended
    assert (host_dirs / "data" / "model.pt").read_text() == "weights\n"
    [log] = list((tmp_path / "logs").rglob("attempt-1.log"))
    assert log.read_text().split()[1] == "32", log.read_text()


def test_the_nfs_mount_command() -> None:
    target = Path("/var/lib/corral/agent/storage/nfs-x")
    assert nfs_mount_argv("nfs1:/datasets", target, read_only=True) == [
        "mount", "-t", "nfs", "-o", "ro,nosuid,nodev", "nfs1:/datasets", str(target)
    ]  # fmt: skip
    assert nfs_mount_argv("[fe80::1]:/x", target, read_only=False)[4] == "rw,nosuid,nodev"
    root = Path("/state/storage")
    one = nfs_mount_point(root, "nfs1:/datasets", read_only=True)
    assert one.parent == root
    assert one == nfs_mount_point(root, "nfs1:/datasets", read_only=True)
    assert one != nfs_mount_point(root, "nfs1:/datasets", read_only=False)
    assert one != nfs_mount_point(root, "nfs2:/datasets", read_only=True)


@root_only
def test_a_failed_nfs_mount_says_why(tmp_path: Path) -> None:
    """Here there is no mount.nfs (nor a server): the mount fails, in its own words."""
    if shutil.which("mount.nfs"):
        pytest.skip("this machine has an NFS client; the failure below needs one that cannot mount")
    with pytest.raises(MountProblem, match=r"could not mount NFS export 127\.0\.0\.1:/nope on this node"):
        mount_nfs_once("127.0.0.1:/nope", True, tmp_path / "storage")
    assert not os.path.ismount(nfs_mount_point(tmp_path / "storage", "127.0.0.1:/nope", True))
