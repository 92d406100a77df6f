"""What a task mounts besides its sandbox's own: its job's storage and its /dev/shm size.

A job names storage configs (``JobSpec.storage``); when a task starts, the agent reads
the configs its attempt's job uses, as they are then, through its node's function
(``node_attempt_storage``: only those, only while the attempt is STARTING here), and
turns each into a bind at ``/mnt/NAME``: read-only when the config or the job's use says
so (a job can narrow, never widen). A ``hostpath`` source is a directory on the node;
an ``nfs`` export is mounted once per node under the agent's state
(``STATE/storage/<hash of the source>``, hidden from tasks) and bound from there.

Storage and a ``shm_mb`` need the sandbox: without one (``isolation: none``) such a task
fails to start, saying why, rather than run without what it asked for.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from services.launcher.agent.repository import NodeRepository
from services.launcher.agent.sandbox.sandbox import Sandbox
from services.launcher.agent.sandbox.storage import Bind
from services.launcher.agent.tasks import Task
from shared.jobs import JobSpec, TaskRole
from shared.storage_spec import check_source

NFS_MOUNT_TIMEOUT_S = 60.0


class MountProblem(OSError):
    """A task's storage or /dev/shm cannot be had on this node; the message says why. An
    ``OSError``: the agent fails the start with it as with any other start's."""


@dataclass(frozen=True)
class TaskMounts:
    binds: tuple[Bind, ...] = ()
    shm_mb: int | None = None


async def task_mounts(
    records: NodeRepository,
    task: Task,
    spec: JobSpec,
    task_role: TaskRole,
    sandbox: Sandbox | None,
    state_dir: Path,
) -> TaskMounts:
    """The binds and /dev/shm size of a starting task (mounting an NFS export first where
    this node has not yet), or ``MountProblem``."""
    if not spec.storage and task_role.shm_mb is None:
        return TaskMounts()
    if sandbox is None:
        asked = "storage" if spec.storage else "a /dev/shm size (shm_mb)"
        raise MountProblem(
            f"the job asks for {asked}, which only a sandboxed node provides, and this node runs tasks"
            " without a sandbox (isolation: none); run its agent as root, with cgroups"
        )
    configs = {str(r["name"]): r for r in await records.attempt_storage(task.attempt_id)}
    binds = []
    for use in spec.storage:
        config = configs.get(use.name)
        if config is None:
            raise MountProblem(
                f"storage {use.name!r} has no config any more (deleted since the submit);"
                " ask an admin to define it again (PUT /api/v1/storage/NAME), or drop it from the job"
            )
        kind, source, read_only = str(config["kind"]), str(config["source"]), bool(config["read_only"])
        on_node = await asyncio.to_thread(source_on_node, kind, source, read_only, state_dir / "storage")
        binds.append(Bind(on_node, use.mount_path, read_only or use.read_only))
    return TaskMounts(tuple(binds), task_role.shm_mb)


def source_on_node(kind: str, source: str, read_only: bool, nfs_root: Path) -> Path:
    """The directory on this node to bind: a hostpath's own, or where its export is mounted."""
    try:
        check_source(kind, source)  # (as the API did: a row changed by hand is no exception)
    except ValueError as exc:
        raise MountProblem(f"storage config: {exc}") from None
    if kind == "hostpath":
        if not Path(source).is_dir():
            raise MountProblem(
                f"storage source {source} is not a directory on this node; a hostpath storage must"
                " exist on every node"
            )
        return Path(source)
    return mount_nfs_once(source, read_only, nfs_root)


def nfs_mount_point(root: Path, source: str, read_only: bool) -> Path:
    """Where this node mounts an export: one place per source and mode."""
    digest = hashlib.sha256(f"{source}\0{'ro' if read_only else 'rw'}".encode()).hexdigest()[:16]
    return root / f"nfs-{digest}"


def nfs_mount_argv(source: str, target: Path, read_only: bool) -> list[str]:
    """The command that mounts an export on the node: never a set-uid program or a
    device from the server, read-only when the config is."""
    options = ("ro" if read_only else "rw") + ",nosuid,nodev"
    return ["mount", "-t", "nfs", "-o", options, source, str(target)]


def mount_nfs_once(source: str, read_only: bool, root: Path) -> Path:
    """The export mounted on this node (now, unless it is already), under a lock so two
    tasks starting together mount it once."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = nfs_mount_point(root, source, read_only)
    lock_fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        if os.path.ismount(target):
            return target
        target.mkdir(mode=0o700, exist_ok=True)
        try:
            done = subprocess.run(
                nfs_mount_argv(source, target, read_only),
                capture_output=True,
                text=True,
                timeout=NFS_MOUNT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MountProblem(f"could not mount NFS export {source}: {exc}") from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip()[-500:]
            raise MountProblem(
                f"could not mount NFS export {source} on this node (exit {done.returncode}): {said};"
                " the node needs the NFS client (Debian: apt-get install nfs-common) and access to the server"
            )
        return target
    finally:
        os.close(lock_fd)  # (closing releases the lock)
