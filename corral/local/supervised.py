"""What the supervisor keeps alive: Corral's services and the stack's own servers.

Every supervised process follows one life: it runs; when it exits the supervisor reaps
it, says how it ended ("exit 1", "killed by signal 9") and starts it again after a
growing delay (0.5, 1, 2 … 10 s; back to 0.5 s once it has stayed up a minute). Five
exits within a minute are a crash loop, said once in a line of its own; it is still
restarted, at the longest delay, so a server whose disk comes back recovers by itself.

A service is a ``python -m`` process (``ManagedService``). A server is ``nats-server``
or Postgres (``ManagedServer``), started by its own class, which also cleans up after a
crash: Postgres' orphaned backends hold the shared memory a new postmaster needs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Literal

CRASH_LOOP_EXITS = 5
CRASH_LOOP_WINDOW_S = 60.0
# A process that stayed up this long has recovered: its next restart is quick again.
STEADY_S = 60.0
MAX_DELAY_S = 10.0

State = Literal["running", "restarting", "crash-loop", "stopped"]


def describe_exit(code: int) -> str:
    """Popen's return code in words: a negative one is the signal that killed it."""
    return f"killed by signal {-code}" if code < 0 else f"exit {code}"


@dataclass
class Supervised(ABC):
    """The bookkeeping every supervised process shares (see the module's docstring)."""

    name: str
    kind: Literal["service", "server"]
    log_path: Path
    pid_path: Path
    restarts: int = 0  # since the supervisor started: what an operator is shown
    last_exit: str | None = None
    last_exit_at: datetime | None = None
    next_start: float = 0.0  # 0: not waiting to restart
    started_at: float = 0.0
    crash_loop_said: bool = False
    _streak: int = 0  # restarts since it last stayed up: the backoff's exponent
    _exits: deque[float] = field(default_factory=deque)

    # --- what each kind provides --------------------------------------------------

    @abstractmethod
    def pid(self) -> int | None:
        """Its pid while it runs, else None."""

    @abstractmethod
    def poll(self) -> int | None:
        """The exit code once it has exited (reaping it), else None."""

    @abstractmethod
    def launch(self) -> None:
        """Start the process itself (``start`` does the bookkeeping around it)."""

    # --- shared life --------------------------------------------------------------

    def start(self) -> None:
        self.launch()
        self.started_at = time.monotonic()
        pid = self.pid()
        if pid is not None:
            self.pid_path.write_text(f"{pid}\n")

    def exited(self, how: str) -> float:
        """Record an exit (``describe_exit``'s words, or why a start failed); the delay
        before the next start."""
        now = time.monotonic()
        self.last_exit = how
        self.last_exit_at = datetime.now(UTC)
        if now - self.started_at > STEADY_S:
            self._streak = 0
        delay = min(MAX_DELAY_S, 0.5 * 2.0**self._streak)
        self._streak += 1
        self._exits.append(now)
        while self._exits and now - self._exits[0] > CRASH_LOOP_WINDOW_S:
            self._exits.popleft()
        if len(self._exits) < CRASH_LOOP_EXITS:
            self.crash_loop_said = False
        self.next_start = now + delay
        return delay

    @property
    def recent_exits(self) -> int:
        """Exits within the crash-loop window, as of the last one."""
        return len(self._exits)

    def crash_looping(self) -> bool:
        return self.recent_exits >= CRASH_LOOP_EXITS

    @property
    def state(self) -> State:
        if self.next_start:
            return "crash-loop" if self.crash_looping() else "restarting"
        return "running" if self.pid() is not None else "stopped"

    def restart_due(self, now: float) -> bool:
        return bool(self.next_start) and now >= self.next_start

    def restarted(self) -> None:
        self.next_start = 0.0
        self.restarts += 1

    def view(self) -> dict[str, object]:
        """What ``run/supervisor.json`` says of it (and the API's services view)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "pid": self.pid(),
            "state": self.state,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
            "last_exit_at": None if self.last_exit_at is None else self.last_exit_at.isoformat(),
            "log": str(self.log_path),
        }


@dataclass
class ManagedService(Supervised):
    module: str = ""
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    def launch(self) -> None:
        self.close_log()
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", self.module],
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def pid(self) -> int | None:
        return None if self.process is None or self.process.returncode is not None else self.process.pid

    def poll(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


@dataclass
class ManagedServer(Supervised):
    """A server the stack runs itself. ``begin`` starts it (and waits until it serves),
    ``process`` gives its Popen, ``after_exit`` cleans up what a crash left behind."""

    begin: Callable[[], None] = lambda: None
    process: Callable[[], subprocess.Popen[bytes] | None] = lambda: None
    after_exit: Callable[[int], None] = lambda _pid: None
    _pid: int | None = None

    def adopt(self) -> None:
        """Take on the server as started before supervision began (its first start, which
        stops ``make up`` when it fails rather than being retried)."""
        process = self.process()
        self._pid = None if process is None else process.pid
        self.started_at = time.monotonic()
        if self._pid is not None:
            self.pid_path.write_text(f"{self._pid}\n")

    def launch(self) -> None:
        self._pid = None
        before = self.process()
        try:
            self.begin()
        except BaseException:
            # A start that failed half way (it never served, or refused its store) may
            # leave a server running that nothing supervises and that holds the port the
            # next try needs.
            started = self.process()
            if started is not None and started is not before:
                if started.poll() is None:
                    started.kill()
                    started.wait()
                self.after_exit(started.pid)
            raise
        process = self.process()
        self._pid = None if process is None else process.pid

    def pid(self) -> int | None:
        process = self.process()
        if process is None or process.returncode is not None or self.next_start:
            return None
        return process.pid

    def poll(self) -> int | None:
        process = self.process()
        if process is None or self.next_start:
            return None
        code = process.poll()
        if code is not None and self._pid is not None:
            self.after_exit(self._pid)
            self._pid = None
        return code


def kill_process_group(leader: int, timeout_s: float = 10.0) -> None:
    """SIGKILL what is left of a dead server's process group (it was started in a session
    of its own, so the group is the server's pid) and wait until none is left."""
    try:
        os.killpg(leader, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and group_members(leader):
        time.sleep(0.05)


def group_members(group: int) -> list[int]:
    """The live processes of a process group (zombies, already dead, are not counted)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[2]) == group and fields[0] != "Z":
            members.append(int(entry.name))
    return members
