"""What a command run inside a running task (an exec) takes from that task.

A sandboxed task is three processes deep (``corral_sandbox.c``): the helper (the pid the
agent holds, in the agent's namespaces), its child INIT (pid 1 of the task's pid
namespace, in the task's mounts) and INIT's first child MAIN (pid 2, the task's own
command, as the task's uid). A command joins INIT's namespaces, and gets MAIN's
environment and identity: what the task itself runs with.

The environment is read from ``/proc/<MAIN>/environ`` (root may), not kept from the
spawn: it is the same after an agent restart that re-adopted the task, with nothing
persisted. It is the environment MAIN was started with (a task that rewrites its own
memory changes what its own execs get, and nothing else: the command still runs as
the task, inside its sandbox).

Everything here reads /proc of the agent's own pid namespace; a process that is gone,
or is not what the layout says, is ``NotJoinable`` with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


class NotJoinable(Exception):
    """The task has no process a command could join; the message says why."""


@dataclass(frozen=True)
class RunningTask:
    """The processes of a running task a command joins, and what it takes from them."""

    init_pid: int
    main_pid: int
    uid: int
    gid: int
    env: dict[str, str]


def children(pid: int) -> list[int]:
    """The children of ``pid``'s main thread (its processes' children all are)."""
    try:
        text = (PROC / str(pid) / "task" / str(pid) / "children").read_text()
    except OSError:
        return []
    return [int(field) for field in text.split()]


def _status_fields(pid: int) -> dict[str, list[str]]:
    try:
        text = (PROC / str(pid) / "status").read_text()
    except OSError:
        return {}
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.split()
    return fields


def namespace_pid(pid: int) -> int | None:
    """``pid``'s number in its innermost pid namespace (None if it is gone)."""
    numbers = _status_fields(pid).get("NSpid")
    return int(numbers[-1]) if numbers else None


def environment_of(pid: int) -> dict[str, str]:
    """The environment ``pid`` was started with."""
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError as exc:
        raise NotJoinable(f"the task's environment cannot be read: {exc.strerror}") from exc
    env: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name:
            env[name.decode(errors="surrogateescape")] = value.decode(errors="surrogateescape")
    return env


def identity_of(pid: int) -> tuple[int, int]:
    """``pid``'s uid and gid; refused unless real, effective, saved and filesystem ids
    agree (a task never changes them: it has no privilege to)."""
    fields = _status_fields(pid)
    uids, gids = set(fields.get("Uid", [])), set(fields.get("Gid", []))
    if len(uids) != 1 or len(gids) != 1:
        raise NotJoinable(f"the task's process {pid} has mixed or no user ids ({uids}, {gids})")
    return int(uids.pop()), int(gids.pop())


def running_task(helper_pid: int) -> RunningTask:
    """INIT and MAIN of the sandboxed task whose helper is ``helper_pid``."""
    init = next((pid for pid in children(helper_pid) if namespace_pid(pid) == 1), None)
    if init is None:
        raise NotJoinable("the task's sandbox has no init process (the task is starting or ending)")
    main = next((pid for pid in children(init) if namespace_pid(pid) == 2), None)
    if main is None:
        raise NotJoinable("the task's command is not running (the task is starting or ending)")
    uid, gid = identity_of(main)
    if uid == 0 or gid == 0:
        raise NotJoinable("the task's command runs as root: refusing to join it")
    return RunningTask(init, main, uid, gid, environment_of(main))
