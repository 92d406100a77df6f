"""Task processes under the agent's wrapper: real ``/bin/sh`` processes, exit files, signals."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from services.launcher.agent.processes import (
    Exit,
    TaskFiles,
    kill_group,
    spawn,
    wait_spawned,
    wrapper_for,
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


async def test_a_stopped_task_ends_and_its_wrapper_records_how(tmp_path: Path) -> None:
    """SIGTERM to the group ends the command (the wrapper's trap is reset in its child
    shell) while the wrapper lives on to record the status: 143, as `sh` reports it."""
    files = TaskFiles.for_attempt(tmp_path / "state", "att-3")
    proc = await spawn(
        "sleep 30; echo not stopped", {"PATH": "/usr/bin:/bin"}, tmp_path / "a.log", files, tmp_path
    )
    for _ in range(100):
        if files.pid_file.exists():
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # the child shell is running its command
    kill_group(proc.pid, signal.SIGTERM)
    ended = await asyncio.wait_for(wait_spawned(proc, files), 10)
    assert ended == Exit(143, None)
    assert (tmp_path / "a.log").read_text() == "Terminated\n"  # the wrapper's word on its child


@pytest.mark.parametrize("reads", ["$$", "${PPID}", "$0"])
async def test_a_command_reading_its_shells_pid_parent_or_name_gets_a_shell_of_its_own(
    tmp_path: Path, reads: str
) -> None:
    """A subshell would show the wrapper's; `sh -c` shows the command's own shell."""
    assert wrapper_for(f"echo {reads}") != wrapper_for("echo hello")
    ended, files, output = await _run(tmp_path, f"echo {reads} $$ $PPID $0")
    assert ended == Exit(0, None)
    wrapper = files.pid_file.read_text().strip()
    _, own_pid, parent, name = output.split()
    assert own_pid != wrapper  # its own shell's pid
    assert parent == wrapper  # whose parent is the wrapper
    assert name == "/bin/sh"
