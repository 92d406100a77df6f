"""Task processes under the agent's wrapper: real ``/bin/sh`` processes, exit files, signals."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from services.launcher.agent.processes import (
    Exit,
    TaskFiles,
    kill_group,
    spawn,
    wait_spawned,
)


async def _run(tmp_path: Path, command: str) -> tuple[Exit, TaskFiles, str]:
    files = TaskFiles.for_attempt(tmp_path / "state", "att-1")
    log = tmp_path / "logs" / "att-1.log"
    proc = await spawn(command, {"PATH": "/usr/bin:/bin"}, log, files, tmp_path)
    ended = await asyncio.wait_for(wait_spawned(proc, files), 10)
    return ended, files, log.read_text()


async def test_the_exit_code_is_recorded_in_place_and_the_output_kept(tmp_path: Path) -> None:
    ended, files, output = await _run(tmp_path, "echo hello; exit 3")
    assert ended == Exit(3, None)
    assert files.read_exit_code() == 3
    assert output == "hello\n"


async def test_a_task_killed_with_its_group_reports_the_signal(tmp_path: Path) -> None:
    files = TaskFiles.for_attempt(tmp_path / "state", "att-2")
    proc = await spawn("sleep 30", {"PATH": "/usr/bin:/bin"}, tmp_path / "att-2.log", files, tmp_path)
    for _ in range(100):  # the wrapper writes its pid first thing
        if files.pid_file.exists():
            break
        await asyncio.sleep(0.01)
    kill_group(proc.pid, signal.SIGKILL)
    ended = await asyncio.wait_for(wait_spawned(proc, files), 10)
    assert ended.signal == signal.SIGKILL
    assert ended.exit_code is None
    assert files.read_exit_code() is None  # the wrapper died too: no status to record
