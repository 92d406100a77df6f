"""``ready_mpi_task``: what the agent does for a task of an MPI or Horovod job before it
spawns it — the launcher's ssh barrier, the job's ssh files, the task's variables.

Who owns the files: the task's identity. With a sandbox, the job's uid on this node is
claimed here (``Sandbox.identities.claim``, which gives a job the same identity for
as long as it holds it — what ``Sandbox.prepare`` claims at the spawn). The agent's
sweep releases the uids of jobs with no task here (``Sandbox.release_unused``); the agent
made this task known to the sandbox before its start's steps (``Sandbox.hold``,
readying.py), so the claim outlives the awaits that follow it. Without a sandbox the
task runs as the agent's user, who owns the files.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.launcher.agent.environment import Peer
from services.launcher.agent.mpi.barrier import BarrierTimeout, SshTarget, wait_for_sshds
from services.launcher.agent.mpi.environment import (
    horovod_environment,
    mpi_environment,
    session_environment,
)
from services.launcher.agent.mpi.ssh_files import (
    SshPaths,
    hostfile_text,
    hydra_hostfile_text,
    known_hosts_text,
    ssh_config_text,
    ssh_port,
    ssh_wrapper_text,
    sshd_config_text,
    worker_name,
    workers_of,
)
from services.launcher.agent.mpi.writing import write_ssh_files
from services.launcher.agent.processes import Exit
from services.launcher.agent.sandbox.gpus import task_gpus
from services.launcher.agent.sandbox.identities import Identity, IdentityProblem
from services.launcher.agent.sandbox.sandbox import Sandbox
from services.launcher.agent.tasks import Task
from shared.jobs import JobSpec
from shared.mpi_spec import LAUNCHER_ROLE, MPI_FRAMEWORKS, WORKER_ROLE, MpiSettings, slots_per_worker

BARRIER_PLATFORM = "mpi_barrier_timeout"
START_FAILED = "start_failed"


@dataclass(frozen=True)
class JobKeys:
    """The generation's keys as the claim hands them: each private key only to the role
    that uses it (the user key to the launcher, the host key to a worker), else None."""

    user_private: str | None
    user_public: str
    host_private: str | None
    host_public: str


def job_keys(value: Any) -> JobKeys | None:
    """The claim's ``ssh_keys`` (jsonb: a dict, or its text), or None without them."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        return None
    return JobKeys(
        value["user_private_key"],
        value["user_public_key"],
        value["host_private_key"],
        value["host_public_key"],
    )


def sshd_binary() -> str | None:
    """The node's sshd (often outside the agent's PATH: an sbin directory)."""
    return shutil.which("sshd") or shutil.which("sshd", path="/usr/sbin:/usr/local/sbin:/sbin")


def agents_identity() -> Identity:
    return Identity(os.getuid(), os.getgid(), pwd.getpwuid(os.getuid()).pw_name)


def job_texts(
    spec: JobSpec, job_id: str, peers: list[Peer], keys: JobKeys, user: str, paths: SshPaths
) -> dict[Path, str]:
    """The files every task of the job on a node shares."""
    workers = workers_of(peers)
    worker_role = next(r for r in spec.tasks if r.name == WORKER_ROLE)
    slots = slots_per_worker(spec.mpi, worker_role.resources.gpu_devices)
    texts = {
        paths.user_public_key: keys.user_public.strip() + "\n",
        paths.authorized_keys: keys.user_public.strip() + "\n",
        paths.known_hosts: known_hosts_text(job_id, keys.host_public),
        paths.config: ssh_config_text(job_id, workers, user, paths),
        paths.hostfile: hostfile_text(workers, slots),
        paths.hydra_hostfile: hydra_hostfile_text(workers, slots),
        paths.ssh_wrapper: ssh_wrapper_text(paths),
    }
    # (a node running both roles of the job gets both, one task's claim each)
    if keys.user_private is not None:
        texts[paths.user_key] = keys.user_private
    if keys.host_private is not None:
        texts[paths.host_key] = keys.host_private
    return texts


def _failure(task: Task, platform: str, reason: str) -> Exit:
    task.platform = platform
    return Exit(None, None, reason)


async def ready_mpi_task(
    task: Task,
    spec: JobSpec,
    row: dict[str, Any],
    peers: list[Peer],
    env: dict[str, str],
    cwd: Path,
    sandbox: Sandbox | None,
) -> Exit | None:
    """Ready a task of an MPI or Horovod job (nothing for another job): ``env`` gains the
    task's variables, the job's ``.ssh`` its files. Returns why the task cannot start
    (its ``platform`` set), or None."""
    if spec.framework not in MPI_FRAMEWORKS:
        return None
    role, index = task.role, task.index
    me = next(p for p in peers if (p.role, p.index) == (role, index))
    keys = job_keys(row.get("ssh_keys"))
    if keys is None:
        return _failure(task, START_FAILED, "the job's ssh keys were not found (its generation has none)")
    sshd = sshd_binary() if role == WORKER_ROLE else None
    if role == WORKER_ROLE and sshd is None:
        return _failure(
            task, START_FAILED, f"no sshd on node {me.node_id}: install openssh-server on node {me.node_id}"
        )
    try:
        targets = [SshTarget(worker_name(w.index), w.host, ssh_port(w)) for w in workers_of(peers)]
    except ValueError as exc:  # (the spec gives every worker its ssh port: an older placement)
        return _failure(task, START_FAILED, f"could not start the task: {exc}")
    if role == LAUNCHER_ROLE:
        timeout_s = (spec.mpi or MpiSettings()).barrier_timeout_s
        # A stop asked for meanwhile ends the wait; the task then starts and is stopped at
        # once, as any task asked to stop while it starts (its end is recorded alike).
        try:
            await wait_for_sshds(targets, timeout_s, lambda: task.stop_reason is not None or task.fenced)
        except BarrierTimeout as exc:
            return _failure(task, BARRIER_PLATFORM, str(exc))
    try:
        identity = (
            agents_identity() if sandbox is None else sandbox.identities.claim(task.job_id, row["username"])
        )
    except IdentityProblem as exc:
        return _failure(task, START_FAILED, f"could not start the task: {exc}")

    def as_process_sees(worker_env: dict[str, str]) -> dict[str, str]:
        return as_sandbox_sets(worker_env, spec, role, sandbox, row)

    try:
        wire_task(spec, task.job_id, me, peers, keys, identity, env, cwd, sshd, as_process_sees)
    except (OSError, ValueError) as exc:
        return _failure(task, START_FAILED, f"could not write the job's ssh files in {cwd / '.ssh'}: {exc}")
    return None


def wire_task(
    spec: JobSpec,
    job_id: str,
    me: Peer,
    peers: list[Peer],
    keys: JobKeys,
    identity: Identity,
    env: dict[str, str],
    cwd: Path,
    sshd: str | None,
    as_process_sees: Callable[[dict[str, str]], dict[str, str]] = dict,
) -> None:
    """``env`` gains the task's variables; ``<cwd>/.ssh`` gets the job's files (and a
    worker's sshd_config, carrying ``as_process_sees(env)`` into its sessions)."""
    paths = SshPaths(cwd / ".ssh")
    env.update(mpi_environment(paths, peers, me.role, me.index, sshd))
    if spec.framework == "horovod":
        env.update(horovod_environment(peers, me.role, me.index))
    texts = job_texts(spec, job_id, peers, keys, identity.name, paths)
    if me.role == WORKER_ROLE:
        session_env = session_environment(as_process_sees(env))
        texts[paths.sshd_config(me.role, me.index)] = sshd_config_text(me, identity.name, paths, session_env)
    write_ssh_files(paths.root, texts, identity, programs=frozenset({paths.ssh_wrapper}))


def as_sandbox_sets(
    env: dict[str, str], spec: JobSpec, role: str, sandbox: Sandbox | None, row: dict[str, Any]
) -> dict[str, str]:
    """A task's environment as its process will see it: a sandbox names its GPUs
    by UUID and sets its threads (``Sandbox.prepare``), which the sessions need too."""
    if sandbox is None:
        return env
    task_role = next(r for r in spec.tasks if r.name == role)
    gpus = task_gpus(list(row["gpu_indices"]), sandbox.config.device_root)
    threads = {"OMP_NUM_THREADS": str(max(1, int(task_role.resources.cpus)))}
    return {**threads, **env, "CUDA_VISIBLE_DEVICES": gpus.cuda_visible_devices}
