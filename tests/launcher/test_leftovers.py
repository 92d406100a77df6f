"""A stopped home's tasks ended, for real: one sandboxed task in its cgroup (with a
daemonised grandchild), one plain task by its pid file, and another home's task spared."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from services.launcher.agent.leftovers import end_tasks_of_home
from services.launcher.agent.processes import TaskFiles, kill_group, spawn, spawn_sandboxed
from services.launcher.settings import SHARED_MEMORY, sandbox_scope_suffix, shared_memory_name
from tests.launcher.sandboxes import prepare_task, sandbox_for_tests

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="real cgroups and namespaces need root")


def _wait_for(predicate: Callable[[], object], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert predicate(), "not within the time given"


def test_a_stopped_homes_tasks_end_and_another_homes_run_on(tmp_path: Path) -> None:
    home, other_home = tmp_path / "home", tmp_path / "other"
    ours = sandbox_for_tests(tmp_path / "ours", node_id="local" + sandbox_scope_suffix(home))
    theirs = sandbox_for_tests(tmp_path / "theirs", node_id="local" + sandbox_scope_suffix(other_home))
    for directory in (tmp_path / "ours", tmp_path / "theirs"):
        directory.mkdir(exist_ok=True)
    sandboxed = prepare_task(ours, tmp_path / "ours", "setsid sh -c 'sleep 5678' & sleep 600")
    spared = prepare_task(theirs, tmp_path / "theirs", "sleep 600")
    helpers = [spawn_sandboxed(t.launch.argv, {"PATH": "/usr/bin:/bin"}) for t in (sandboxed, spared)]
    plain_files = TaskFiles.for_attempt(SHARED_MEMORY / shared_memory_name(home) / "local", "att-plain")
    plain = asyncio.run(
        spawn("sleep 600", {"PATH": "/usr/bin:/bin"}, tmp_path / "plain.log", plain_files, tmp_path)
    )
    try:
        _wait_for(lambda: len(sandboxed.launch.cgroup.processes()) >= 3 and spared.launch.cgroup.processes())
        _wait_for(plain_files.pid_file.exists)
        members = sandboxed.launch.cgroup.processes()

        assert end_tasks_of_home(home) == sorted([sandboxed.attempt_id, "att-plain"])

        assert helpers[0].wait(10) == 128 + signal.SIGKILL
        assert plain.wait(10) == -signal.SIGKILL
        assert not any(Path(f"/proc/{p}").exists() for p in members)  # the daemonised grandchild too
        assert not any(d.exists() for d in sandboxed.launch.cgroup.directories.values())
        assert not (SHARED_MEMORY / shared_memory_name(home)).exists()
        # Another home's task is none of its business.
        assert helpers[1].poll() is None
        assert spared.launch.cgroup.processes()
        assert end_tasks_of_home(home) == [], "a second call finds nothing left"
    finally:
        spared.launch.cgroup.kill()
        kill_group(plain.pid)
        for process in (*helpers, plain):
            process.kill()
            process.wait(10)
        shutil.rmtree(SHARED_MEMORY / shared_memory_name(home), ignore_errors=True)
        for sandbox, task in ((ours, sandboxed), (theirs, spared)):
            _wait_for(partial(sandbox.finish, task.attempt_id, task.job_id))
            sandbox.close()
