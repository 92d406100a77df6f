"""``ready_job_ssh``: what the agent does for a task of a generic job with ``ssh`` before it
spawns it — the job's ssh files, the task's variables, and the command it runs.

The keys come from ``launcher.node_attempt_ssh`` (migration 0041): the generation's two
pairs, every task both (each runs an sshd and, with ``between_tasks``, logs in to the
others), and the public keys that may log in besides the job's (``authorized_keys`` and
the submitter's named ``user_keys``, as they are now).

Who owns the files: the task's identity, claimed here as for an MPI task
(``services/launcher/agent/mpi/wiring.py`` says why the claim outlives the start's awaits).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from services.launcher.agent.environment import Peer
from services.launcher.agent.job_ssh.texts import ordered, ssh_wrapper_text, task_name, wrapped_command
from services.launcher.agent.mpi.environment import is_loopback, session_environment
from services.launcher.agent.mpi.ssh_files import (
    SshPaths,
    known_hosts_text,
    ssh_config_text,
    ssh_port,
    sshd_config_text,
)
from services.launcher.agent.mpi.wiring import START_FAILED, agents_identity, as_sandbox_sets, sshd_binary
from services.launcher.agent.mpi.writing import write_ssh_files
from services.launcher.agent.processes import Exit
from services.launcher.agent.sandbox.identities import Identity, IdentityProblem
from services.launcher.agent.sandbox.sandbox import Sandbox
from services.launcher.agent.tasks import Task
from shared.jobs import JobSpec, TaskRole
from shared.ssh_spec import SshSettings


class SshRecords(Protocol):
    async def attempt_ssh(self, attempt_id: str) -> Any: ...


@dataclass(frozen=True)
class TaskKeys:
    """What a task of the job holds: the job's user key (None without ``between_tasks``),
    its host key, and every public key that may log in."""

    user_private: str | None
    user_public: str
    host_private: str
    host_public: str
    authorized: tuple[str, ...]


def task_keys(row: Mapping[str, Any]) -> TaskKeys:
    return TaskKeys(
        row["user_private_key"],
        row["user_public_key"],
        row["host_private_key"],
        row["host_public_key"],
        tuple(row["authorized_keys"] or ()),
    )


def _failure(task: Task, reason: str) -> Exit:
    task.platform = START_FAILED
    return Exit(None, None, reason)


async def ready_job_ssh(
    records: SshRecords,
    task: Task,
    spec: JobSpec,
    role: TaskRole,
    row: dict[str, Any],
    peers: list[Peer],
    env: dict[str, str],
    cwd: Path,
    sandbox: Sandbox | None,
) -> TaskRole | Exit:
    """The role to run (``role``, its command wrapped with the task's sshd), or why the
    task cannot start (its ``platform`` set); ``env`` gains the task's variables and the
    job's ``.ssh`` its files. A job without ``ssh``: ``role`` as it is."""
    if spec.ssh is None:
        return role
    me = next(p for p in peers if (p.role, p.index) == (task.role, task.index))
    sshd, ssh = sshd_binary(), shutil.which("ssh")
    if sshd is None or ssh is None:
        return _failure(
            task, f"no sshd or ssh on node {me.node_id}: install openssh-server and openssh-client there"
        )
    keys_row = await records.attempt_ssh(task.attempt_id)
    if keys_row is None:
        return _failure(task, "the job's ssh keys were not found (its generation has none)")
    try:
        identity = (
            agents_identity() if sandbox is None else sandbox.identities.claim(task.job_id, row["username"])
        )
    except IdentityProblem as exc:
        return _failure(task, f"could not start the task: {exc}")

    def as_process_sees(task_env: dict[str, str]) -> dict[str, str]:
        return as_sandbox_sets(task_env, spec, task.role, sandbox, row)

    try:
        command = wire_job_task(
            spec.ssh,
            task.job_id,
            me,
            peers,
            task_keys(keys_row),
            identity,
            env,
            cwd,
            (sshd, ssh),
            role.command,
            as_process_sees,
        )
    except (OSError, ValueError) as exc:
        return _failure(task, f"could not write the job's ssh files in {cwd / '.ssh'}: {exc}")
    return role.model_copy(update={"command": command})


def wire_job_task(
    settings: SshSettings,
    job_id: str,
    me: Peer,
    peers: list[Peer],
    keys: TaskKeys,
    identity: Identity,
    env: dict[str, str],
    cwd: Path,
    binaries: tuple[str, str],
    command: str,
    as_process_sees: Any = dict,
) -> str:
    """``env`` gains the task's variables, ``<cwd>/.ssh`` the job's files (the task's
    sshd_config carrying ``as_process_sees(env)`` into its sessions); the command that
    runs ``command`` beside the task's sshd. ``binaries``: sshd's and ssh's paths."""
    sshd, ssh = binaries
    paths = SshPaths(cwd / ".ssh")
    env["PAI_CONTAINER_SSH_PORT"] = str(ssh_port(me))
    texts = {
        paths.authorized_keys: "".join(f"{key.strip()}\n" for key in (keys.user_public, *keys.authorized)),
        paths.host_key: keys.host_private,
        paths.known_hosts: known_hosts_text(job_id, keys.host_public),
    }
    if settings.between_tasks and keys.user_private is not None:
        env["CORRAL_SSH_CONFIG"] = str(paths.config)
        env["PATH"] = os.pathsep.join([str(paths.root), *filter(None, [env.get("PATH")])])
        texts |= {
            paths.user_key: keys.user_private,
            paths.user_public_key: keys.user_public.strip() + "\n",
            paths.config: ssh_config_text(job_id, ordered(peers), identity.name, paths, name=task_name),
            paths.ssh_wrapper: ssh_wrapper_text(ssh, paths),
        }
    # The gateway (`corral ssh`) reaches a task's port on the node's loopback.
    also = () if is_loopback(me.host) else ("127.0.0.1",)
    sshd_config = paths.sshd_config(me.role, me.index)
    session_env = session_environment(as_process_sees(env))
    texts[sshd_config] = sshd_config_text(me, identity.name, paths, session_env, also_listen=also)
    write_ssh_files(paths.root, texts, identity, programs=frozenset({paths.ssh_wrapper}))
    barrier = (peers, ssh, paths.config, settings.barrier_timeout_s) if settings.barrier else None
    return wrapped_command(command, sshd, sshd_config, barrier=barrier)
