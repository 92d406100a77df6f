"""The texts of a generic job's ssh wiring (pure: no file is touched).

The files are the MPI wiring's (``services/launcher/agent/mpi/ssh_files.py``): the job's
host key pinned under one alias, an unprivileged sshd per task with the task's variables
in its sessions. What differs for a generic job:

- every task runs the sshd, and every task is in the ssh config, named ``ROLE-INDEX``;
- ``.ssh/ssh`` runs the system's ssh with the config (``ssh -F``), and ``.ssh`` leads the
  task's PATH, so ``ssh worker-1 hostname`` works with no option even where ssh reads
  another ``~/.ssh/config`` (a task run as the agent's own user: ssh takes ``~`` from
  the passwd entry, not from ``HOME``). In a sandbox ``HOME`` is the working directory,
  and ``~/.ssh/config`` is the job's config too;
- the task's command is wrapped (``wrapped_command``): the sshd starts in the background,
  the barrier (if asked) waits, then the user's command runs in a subshell, unchanged;
  the sshd is stopped when the command ends (and dies with the task's process group or
  cgroup when the task is stopped).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from services.launcher.agent.environment import Peer
from services.launcher.agent.mpi.ssh_files import SshPaths, ssh_port

# The barrier's exit status and the line it writes; exit_codes.yaml matches both, so
# the task's end is classified, and its log names the task that did not answer.
BARRIER_EXIT_CODE = 124
BARRIER_MESSAGE = "corral ssh barrier:"
BARRIER_RETRY_S = 0.2
BARRIER_CONNECT_TIMEOUT_S = 2


def task_name(peer: Peer) -> str:
    """How the job's tasks call each other: ``ROLE-INDEX``, as OpenPAI's jobssh does."""
    return f"{peer.role}-{peer.index}"


def ordered(peers: list[Peer]) -> list[Peer]:
    return sorted(peers, key=lambda p: (p.role, p.index))


def ssh_wrapper_text(ssh_binary: str, paths: SshPaths) -> str:
    """``.ssh/ssh``: the system's ssh by its full path (``.ssh`` is on PATH: a bare
    ``ssh`` here would run this script again) with the job's config."""
    return f'#!/bin/sh\nexec {shlex.quote(ssh_binary)} -F {shlex.quote(str(paths.config))} "$@"\n'


def _barrier(peers: list[Peer], ssh_binary: str, config: Path, timeout_s: float) -> list[str]:
    """Shell lines that wait until every task's sshd lets the job's key log in, or exit
    with ``BARRIER_EXIT_CODE`` naming the first that did not (logging in, not only a
    banner: the task's host key is pinned, and the login proves the key is in place)."""
    seconds = max(1, round(timeout_s))
    ssh = (
        f"{shlex.quote(ssh_binary)} -F {shlex.quote(str(config))} "
        f"-o ConnectTimeout={BARRIER_CONNECT_TIMEOUT_S}"
    )
    lines = [
        "corral_ssh_wait() {",
        f'  until {ssh} "$1" true </dev/null >/dev/null 2>&1; do',
        '    if [ "$(date +%s)" -ge "$corral_ssh_deadline" ]; then',
        f'      echo "{BARRIER_MESSAGE} $1 ($2) did not answer within {seconds} s; '
        "check that task's log\" >&2",
        f"      exit {BARRIER_EXIT_CODE}",
        "    fi",
        f"    sleep {BARRIER_RETRY_S}",
        "  done",
        "}",
        f"corral_ssh_deadline=$(( $(date +%s) + {seconds} ))",
    ]
    for peer in ordered(peers):
        where = shlex.quote(f"{peer.host}:{ssh_port(peer)}")
        lines.append(f"corral_ssh_wait {shlex.quote(task_name(peer))} {where}")
    return lines


def wrapped_command(
    command: str,
    sshd: str,
    sshd_config: Path,
    *,
    barrier: tuple[list[Peer], str, Path, float] | None = None,
) -> str:
    """The task's command with its sshd beside it (module docstring); ``barrier``: the
    peers, the ssh binary, the job's ssh config and the timeout to wait with."""
    lines = [
        f"{shlex.quote(sshd)} -D -e -f {shlex.quote(str(sshd_config))} &",
        "corral_sshd=$!",
        "trap 'kill \"$corral_sshd\" 2>/dev/null' EXIT",
    ]
    if barrier is not None:
        lines += _barrier(*barrier)
    # A subshell of its own: `exit` in the command ends it alone, with its status, and
    # the status of the whole is the command's.
    lines += ["(", command, ")"]
    return "\n".join(lines) + "\n"
