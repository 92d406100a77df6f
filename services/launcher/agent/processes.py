"""Task processes: start, watch, stop, and re-adopt after an agent restart.

Each task runs under a tiny ``/bin/sh`` wrapper in its own session (so its whole process
group can be signalled). The wrapper writes its pid to ``<attempt>.pid`` before running
the command and the command's exit status to ``<attempt>.exit`` after (read only once
the wrapper is gone: see ``_WRAPPER``). A restarted agent cannot ``wait()`` for
processes it did not spawn, so it re-adopts a running task by watching its pid (checked
against the process start time, so a recycled pid is not mistaken for the task) and
reads the exit file when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Container
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.launcher.agent.sandbox.accounts import remove_account_files

# "$1" is the user's command, "$2" the pid file, "$3" the exit file. The command runs
# in a child shell so that `exit 3` inside it still lets the wrapper record 3. The
# wrapper *catches* (does not ignore) SIGTERM/SIGINT: a stop signals the whole process
# group, and the wrapper must outlive the command to record how it ended. (Caught
# signals are reset to their defaults in the child, so the command's own traps work.)
# The exit file is read only once the wrapper has exited (``wait_spawned``, or
# ``wait_adopted`` after the pid is gone), so it is written in place: a rename would
# cost a fork and exec of ``mv`` per task, and a wrapper killed mid-write leaves an
# empty file, read as "no exit status" like a missing one.
_WRAPPER = 'trap : TERM INT; echo $$ > "$2"; {child}; code=$?; echo $code > "$3"; exit $code'
# The child shell is a subshell, a fork of the wrapper (less CPU per task than a shell
# of its own, which execs /bin/sh again), with no positional parameters,
# as in `sh -c`. A subshell inherits three things from the wrapper that would tell the
# two apart: the pid in $$, the parent pid in $PPID and the name in $0. A command that
# reads any of them gets a shell of its own, so it sees what `sh -c` would show it.
_IN_SUBSHELL = _WRAPPER.format(child='corral_command=$1; (set --; eval "$corral_command")')
_IN_OWN_SHELL = _WRAPPER.format(child='/bin/sh -c "$1"')
_READS_ITS_SHELL = re.compile(r"\$(\$|\{?0|\{?PPID)")
_POLL_S = 0.05
NUL = bytes(1)  # how often a task's exit is polled for where the kernel has no pidfds


def wrapper_for(command: str) -> str:
    """The wrapper script that runs ``command`` (see ``_WRAPPER``)."""
    return _IN_OWN_SHELL if _READS_ITS_SHELL.search(command) else _IN_SUBSHELL


@dataclass(frozen=True)
class TaskFiles:
    pid_file: Path
    exit_file: Path

    @classmethod
    def for_attempt(cls, state_dir: Path, attempt_id: str) -> TaskFiles:
        return cls(state_dir / f"{attempt_id}.pid", state_dir / f"{attempt_id}.exit")

    def read_exit_code(self) -> int | None:
        recorded = self.read_exit()
        return recorded.exit_code if recorded is not None else None

    def read_exit(self) -> Exit | None:
        """What the exit file says: an exit code ("3"), or (written by the sandbox
        helper) a minus sign and the signal that killed the task ("-9"), or 125 and the
        step of the sandbox that failed on a second line."""
        try:
            first, _, rest = self.exit_file.read_text().partition("\n")
            value = int(first.strip())
        except (FileNotFoundError, ValueError):
            return None
        if value < 0:
            return Exit(None, -value)
        return Exit(value, None, f"could not start the task: {rest.strip()}" if rest.strip() else "")

    def remove(self) -> None:
        self.pid_file.unlink(missing_ok=True)
        self.exit_file.unlink(missing_ok=True)
        remove_account_files(self.pid_file)  # a sandboxed task's (also one an earlier agent started)


@dataclass(frozen=True)
class Exit:
    exit_code: int | None
    signal: int | None
    reason: str = ""


def process_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may contain spaces; fields after its ')' are fixed.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def is_same_process_alive(pid: int, start_ticks: int | None) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone (or never ours to read)
        return False
    fields = stat[stat.rindex(")") + 2 :].split()
    state, ticks = fields[0], int(fields[19])
    return state != "Z" and (start_ticks is None or ticks == start_ticks)


def task_pid_from_file(pid_file: Path) -> int | None:
    """The task wrapper's pid from its pid file, if that process is still the wrapper."""
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if str(pid_file).encode() in cmdline else None


async def spawn(
    command: str, env: dict[str, str], log_path: Path, files: TaskFiles, cwd: Path
) -> subprocess.Popen[bytes]:
    """Start the task's wrapper in a session of its own, its output to ``log_path``.

    A plain ``subprocess.Popen`` (CPython vforks: the cost does not grow with the
    agent's size), not the event loop's subprocess API: uvloop's forks (several times
    the CPU per spawn), and asyncio's own loop costs more per database and NATS round
    trip than uvloop, which the agent does a dozen of per task (docs/performance.md has
    the figures). Its exit is awaited on a pidfd (``wait_spawned``)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    files.pid_file.parent.mkdir(parents=True, exist_ok=True)
    files.remove()
    with log_path.open("ab") as log:
        return subprocess.Popen(  # noqa: ASYNC220 - vfork + exec: as quick as the loop's own spawn
            [
                "/bin/sh",
                "-c",
                wrapper_for(command),
                "corral-task",
                command,
                str(files.pid_file),
                str(files.exit_file),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )


def spawn_sandboxed(argv: list[str], env: dict[str, str], **popen: Any) -> subprocess.Popen[bytes]:
    """Start a task through the sandbox helper (``sandbox/corral_sandbox.c``), which
    writes the pid, log and exit files itself. In a session of its own, like ``spawn``'s
    wrapper, so a restarted agent's orphan sweep can kill it by process group.

    The helper runs as root with an empty environment: the task's (``env``, partly the
    job's own) goes to it in a memfd, for the task alone. In the helper's own
    environment, a job's ``LD_PRELOAD`` would run code as root."""
    fd = os.memfd_create("corral-task-env", os.MFD_CLOEXEC)
    try:
        os.write(fd, b"".join(f"{name}={value}".encode() + NUL for name, value in env.items()))
        return subprocess.Popen(  # our own helper, its arguments built by the agent
            [argv[0], "--env-fd", str(fd), *argv[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env={},
            pass_fds=(fd,),
            start_new_session=True,
            **popen,
        )
    finally:
        os.close(fd)


async def wait_spawned(proc: subprocess.Popen[bytes], files: TaskFiles) -> Exit:
    returncode = await _exited(proc)
    if returncode < 0:
        return Exit(None, -returncode, f"killed by signal {-returncode}")
    recorded = files.read_exit()
    return recorded if recorded is not None else Exit(returncode, None)


async def _exited(proc: subprocess.Popen[bytes]) -> int:
    """Our child's exit status, once it has exited, without a thread blocked in
    ``waitpid``: a pidfd (Linux 5.3+) becomes readable when the process exits, and is
    just one more file descriptor for the event loop. Without pidfds, poll."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        while proc.poll() is None:  # noqa: ASYNC110 - no pidfds on this kernel
            await asyncio.sleep(_POLL_S)
        return proc.returncode
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def readable() -> None:  # (called on every turn of the loop until the reader goes)
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(pidfd, readable)
    try:
        await exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    return proc.wait()  # reaps it: it has exited, so this does not block


async def wait_adopted(pid: int, start_ticks: int | None, files: TaskFiles, poll_s: float = 0.5) -> Exit:
    """Wait for a process this agent did not spawn (re-adopted after a restart)."""
    # Not our child: no wait() and no event to await, so poll /proc.
    while is_same_process_alive(pid, start_ticks):  # noqa: ASYNC110
        await asyncio.sleep(poll_s)
    recorded = files.read_exit()
    if recorded is None:
        return Exit(None, None, "the task's process vanished without recording an exit status")
    return recorded


def kill_group(pid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def kill_orphans(state_dir: Path, keep: Container[str]) -> list[str]:
    """Kill task processes of attempts not in ``keep`` and forget their files.

    After an agent restart, these are tasks of attempts the platform declared lost while
    no agent was watching. A pid counts only if its command line names the attempt's own
    pid file, so a recycled pid is never killed by mistake. Returns the attempts killed.
    """
    killed = []
    for pid_file in state_dir.glob("*.pid"):
        attempt_id = pid_file.stem
        if attempt_id in keep:
            continue
        pid = task_pid_from_file(pid_file)
        if pid is not None:
            kill_group(pid, signal.SIGKILL)
            killed.append(attempt_id)
        TaskFiles.for_attempt(state_dir, attempt_id).remove()
    return killed
