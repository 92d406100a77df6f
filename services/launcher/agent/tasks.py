"""What the node agent knows of each attempt it handles, and how it signals one."""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from services.launcher.agent.processes import TaskFiles, kill_group
from services.launcher.agent.sandbox.cgroups import TaskCgroup
from shared.jobs import ExitRule


@dataclass
class Task:
    """What the agent knows about one attempt it handles."""

    attempt_id: str
    job_id: str = ""
    generation: int = 0
    role: str = ""
    index: int = 0
    ports: dict[str, list[int]] = field(default_factory=dict)  # allocated, by label
    files: TaskFiles | None = None
    log_path: Path | None = None
    rules: tuple[ExitRule, ...] = ()
    pid: int | None = None
    ended: bool = False
    stop_reason: str | None = None  # set once a stop was asked for
    platform: str | None = None  # a condition the agent itself caused (max runtime)
    fenced: bool = False  # the platform gave up on it: kill it, never report it
    signalled: bool = False  # SIGTERM sent (a stop is signalled once, whoever asks)
    cgroup: TaskCgroup | None = None  # sandboxed: every process of the task
    memory_mb: int = 0
    gpu_indices: tuple[int, ...] = ()  # the GPUs it holds, as the node numbers them
    output_dir: Path | None = None  # its job declares outputs: uploaded when it ends
    outputs_problem: str | None = None  # why its outputs could not be saved

    def kill(self) -> None:
        """SIGKILL every process of the task: its cgroup when sandboxed (a grandchild
        that left the process group included), else the wrapper's process group."""
        if self.cgroup is not None:
            self.cgroup.kill()
        elif self.pid is not None:
            kill_group(self.pid, signal.SIGKILL)

    def terminate(self) -> None:
        """Ask the task to stop: SIGTERM to every process of it. Sandboxed, the helper
        relays it to the task's pid-1, which sends it to every process of the task."""
        if self.pid is None:
            return
        if self.cgroup is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
        else:
            kill_group(self.pid, signal.SIGTERM)


@dataclass(frozen=True)
class LiveOrWatched:
    """Attempts live in the database (as read) or handled by this agent (as of now)."""

    live: set[str]
    watched: dict[str, Task]

    def __contains__(self, attempt_id: object) -> bool:
        return attempt_id in self.live or attempt_id in self.watched
