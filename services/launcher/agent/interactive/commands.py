"""Starting a command inside a running task, on a pty or pipes, and killing all it started.

Sandboxed (the node's tasks run in ``corral_sandbox.c``): the helper's join mode runs
the command in the task's cgroups and pid, mount and IPC namespaces, as the task's uid,
in its working directory, with its environment (``sandbox/joining.py``). The helper
runs as root with an empty environment and gets the task's through a memfd, as a task's
start does (``processes.spawn_sandboxed``); it says the command's pid on a pipe.

Unsandboxed (``CORRAL_AGENT_ALLOW_UNISOLATED``): the command runs as the agent's own
user, which is what the task runs as there, in the task's working directory and with
the task's environment (read from its process). It is no more isolated than the task.

Either way the command leads a session of its own. When the exec ends, for whatever
reason, every process still in that session is killed (``kill_session``): the shell's
background jobs go with it. A process that left the session (``setsid``, a daemon) runs
on until the task ends, as it would had the task started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import struct
import subprocess
import termios
import time
from dataclasses import dataclass, field
from pathlib import Path

from services.launcher.agent.processes import NUL
from shared.interactive.protocol import Channel

# No command: an interactive shell, bash where the task can run it.
DEFAULT_SHELL = ["/bin/sh", "-c", "if [ -x /bin/bash ]; then exec /bin/bash; fi; exec /bin/sh"]
# A command named without a path is looked up in the task's own PATH, inside the task.
PATH_LOOKUP = "/usr/bin/env"


def command_argv(command: list[str]) -> list[str]:
    if not command:
        return DEFAULT_SHELL
    if command[0].startswith("/"):
        return command
    return [PATH_LOOKUP, "--", *command]


@dataclass(frozen=True)
class ExecTarget:
    """What to start: ``argv`` (the helper's, when sandboxed), the task's environment,
    and the working directory (None: the helper changes into it)."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path | None
    sandboxed: bool


@dataclass
class ExecProcess:
    """A started command: its process, where input goes, where output comes from."""

    popen: subprocess.Popen[bytes]
    stdin: int | None  # the pty's master, or the write end of stdin's pipe
    outputs: list[tuple[int, Channel]]  # fds to read, and the channel each goes out on
    terminal: int | None  # the pty's master (resizes)
    report: int | None = None  # sandboxed: where the helper says the command's pid
    leader: int | None = None  # the pid that leads the command's session
    _own: list[int] = field(default_factory=list)

    def resize(self, cols: int, rows: int) -> None:
        if self.terminal is not None:
            fcntl.ioctl(self.terminal, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def close_stdin(self) -> None:
        """The user's input ended: a pipe is closed, a terminal gets ^D (its EOF)."""
        if self.stdin is None:
            return
        if self.stdin == self.terminal:
            with contextlib.suppress(OSError):
                os.write(self.terminal, b"\x04")
            return
        self._close(self.stdin)
        self.stdin = None

    def session_leader(self) -> int | None:
        """The session's leader: the command itself (the helper's child when sandboxed)."""
        if self.leader is None and self.report is not None:
            with contextlib.suppress(OSError, ValueError):
                said = os.read(self.report, 32)
                if said:
                    self.leader = int(said)
        return self.leader

    def hang_up(self) -> None:
        """SIGHUP to the command's process group, as a terminal hanging up sends (the
        helper relays it when sandboxed)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.report is not None:
                self.popen.send_signal(signal.SIGHUP)
            else:
                os.killpg(self.popen.pid, signal.SIGHUP)

    def close_fds(self) -> None:
        for fd in list(self._own):
            self._close(fd)

    def _close(self, fd: int) -> None:
        if fd in self._own:
            self._own.remove(fd)
            os.close(fd)


@dataclass
class _Stdio:
    stdin: int
    stdout: int
    stderr: int


def _take_terminal() -> None:  # (in the child, after setsid)
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def start(target: ExecTarget, *, tty: bool, stdin: bool, cols: int, rows: int) -> ExecProcess:
    """Start the command; ``OSError`` if it cannot be."""
    child_ends: list[int] = []
    own: list[int] = []
    try:
        if tty:
            master, slave = os.openpty()
            own.append(master)
            child_ends.append(slave)
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            stdio = _Stdio(slave, slave, slave)
            input_fd: int | None = master if stdin else None
            outputs = [(master, Channel.STDOUT)]
        else:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            own += [out_r, err_r]
            child_ends += [out_w, err_w]
            stdio = _Stdio(subprocess.DEVNULL, out_w, err_w)
            input_fd = None
            if stdin:
                in_r, in_w = os.pipe()
                own.append(in_w)
                child_ends.append(in_r)
                stdio.stdin = in_r
                input_fd = in_w
            outputs = [(out_r, Channel.STDOUT), (err_r, Channel.STDERR)]
        report: int | None = None
        if target.sandboxed:
            report, report_w = os.pipe()
            own.append(report)
            child_ends.append(report_w)
            popen = _start_helper(target, stdio, report_w)
        else:
            popen = subprocess.Popen(  # the agent's own user: what the task runs as here
                target.argv,
                env=target.env,
                cwd=target.cwd,
                start_new_session=True,
                # Popen has no option to take a terminal: one ioctl after its setsid, the
                # least Python a child forked from a process with threads can run.
                preexec_fn=_take_terminal if tty else None,
                stdin=stdio.stdin,
                stdout=stdio.stdout,
                stderr=stdio.stderr,
            )
    except BaseException:
        for fd in own + child_ends:
            os.close(fd)
        raise
    for fd in child_ends:
        os.close(fd)
    for fd in own:
        os.set_blocking(fd, False)
    terminal = outputs[0][0] if tty else None
    leader = None if target.sandboxed else popen.pid
    return ExecProcess(popen, input_fd, outputs, terminal, report, leader, _own=own)


def _start_helper(target: ExecTarget, stdio: _Stdio, report: int) -> subprocess.Popen[bytes]:
    env_fd = os.memfd_create("corral-exec-env", os.MFD_CLOEXEC)
    try:
        os.write(env_fd, b"".join(f"{name}={value}".encode() + NUL for name, value in target.env.items()))
        helper, *rest = target.argv
        # Started from the event loop's thread, which lives as long as the agent: the
        # helper's PR_SET_PDEATHSIG watches the thread that started it, not the process.
        return subprocess.Popen(  # our own helper, its arguments built by the agent
            [helper, "--env-fd", str(env_fd), "--pid-fd", str(report), *rest],
            env={},
            pass_fds=(env_fd, report),
            start_new_session=True,
            stdin=stdio.stdin,
            stdout=stdio.stdout,
            stderr=stdio.stderr,
        )
    finally:
        os.close(env_fd)


def _session_of(pid: int) -> int | None:
    """The session ``pid`` is in (None once it is gone or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else int(fields[3])


def kill_session(leader: int, rounds: int = 50) -> int:
    """SIGKILL every process of the session ``leader`` leads, until none is left (a
    process forking meanwhile is caught by the next round); how many were killed.

    Safe against recycled pids: a session's number stays taken while any process is
    in it, and each kill goes through a pidfd opened before the last check."""
    killed = 0
    for _ in range(rounds):
        pids = (int(name) for name in os.listdir("/proc") if name.isdigit())
        members = [pid for pid in pids if _session_of(pid) == leader]
        if not members:
            break
        for pid in members:
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                if _session_of(pid) == leader:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                    killed += 1
            except OSError:
                pass
            finally:
                os.close(pidfd)
        time.sleep(0.01)
    return killed


async def exited(popen: subprocess.Popen[bytes]) -> int:
    """The process's exit status once it has exited (reaped), awaited on a pidfd."""
    pidfd = os.pidfd_open(popen.pid)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(pidfd, readable)
    try:
        await done
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    return popen.wait()  # it has exited: this reaps it without blocking
