"""The sandbox helper's join mode: a command run inside a running task, for real.

A task is started through ``Sandbox.prepare`` and the helper as the node agent starts
it; commands are then joined to it with ``Sandbox.join_argv`` and shown to run as the
task does (its uid, cgroup, pid and mount namespaces, working directory, environment)
and never as root or outside it. A process that is not a task's init is never joined.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.launcher.agent.processes import NUL, spawn_sandboxed
from services.launcher.agent.sandbox.joining import NotJoinable, RunningTask, running_task
from services.launcher.agent.sandbox.sandbox import Sandbox
from tests.launcher.sandboxes import DYNAMIC_UIDS, PreparedTask, prepare_task

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")


@pytest.fixture
def task(sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[PreparedTask, subprocess.Popen[bytes]]]:
    """A running sandboxed task (``sleep``), with RANK in its environment."""
    prepared = prepare_task(sandbox, tmp_path, "echo started; exec sleep 60")
    helper = spawn_sandboxed(
        prepared.launch.argv, {"PATH": "/usr/bin:/bin", "RANK": "3", **prepared.launch.env}
    )
    for _ in range(200):
        if "started" in (prepared.log.read_text() if prepared.log.exists() else ""):
            break
        time.sleep(0.025)
    yield prepared, helper
    helper.kill()
    helper.wait(10)
    for _ in range(100):
        if sandbox.finish(prepared.attempt_id, prepared.job_id):
            break
        time.sleep(0.05)


def _join(argv: list[str], env: dict[str, str], *, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """Run the helper's join command as the agent does: its environment in a memfd."""
    fd = os.memfd_create("test-env", os.MFD_CLOEXEC)
    try:
        os.write(fd, b"".join(f"{k}={v}".encode() + NUL for k, v in env.items()))
        return subprocess.run(
            [argv[0], "--env-fd", str(fd), *argv[1:]],
            input=stdin,
            capture_output=True,
            env={},
            pass_fds=(fd,),
            timeout=30,
            check=False,
        )
    finally:
        os.close(fd)


def _joined(sandbox: Sandbox, prepared: PreparedTask, running: RunningTask, command: list[str]) -> list[str]:
    return sandbox.join_argv(
        attempt_id=prepared.attempt_id,
        job_id=prepared.job_id,
        task=running,
        workdir=prepared.log.parent / "work" / prepared.attempt_id,
        command=command,
        tty=False,
    )


def test_a_joined_command_runs_as_the_task_inside_its_sandbox(
    sandbox: Sandbox, task: tuple[PreparedTask, subprocess.Popen[bytes]]
) -> None:
    prepared, helper = task
    running = running_task(helper.pid)
    assert DYNAMIC_UIDS[0] <= running.uid <= DYNAMIC_UIDS[1]
    assert running.env["RANK"] == "3"
    script = (
        "echo rank=$RANK; echo uid=$(id -u); echo cwd=$(pwd); echo pids=$(ls /proc | grep -c '^[0-9]'); "
        "echo; cat /proc/self/cgroup; cat"
    )
    argv = _joined(sandbox, prepared, running, ["/bin/sh", "-c", script])
    done = _join(argv, running.env, stdin=b"typed in\n")
    said = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    head, _, cgroups = said.partition("\n\n")
    facts = dict(line.split("=", 1) for line in head.splitlines())
    assert facts["rank"] == "3"
    assert facts["uid"] == str(running.uid)
    assert facts["cwd"] == str(prepared.log.parent / "work" / prepared.attempt_id)
    # Its own pid namespace: init, the task's sleep, the shell, ls and grep; not the host's.
    assert int(facts["pids"]) <= 6, said
    # The task's own cgroups (the attempt's), not the agent's.
    assert prepared.attempt_id in cgroups
    assert cgroups.removesuffix("typed in\n") == Path(f"/proc/{running.main_pid}/cgroup").read_text()
    assert said.endswith("typed in\n")


def test_the_joined_commands_exit_code_comes_back(
    sandbox: Sandbox, task: tuple[PreparedTask, subprocess.Popen[bytes]]
) -> None:
    prepared, helper = task
    running = running_task(helper.pid)
    assert (
        _join(_joined(sandbox, prepared, running, ["/bin/sh", "-c", "exit 3"]), running.env).returncode == 3
    )
    killed = _join(_joined(sandbox, prepared, running, ["/bin/sh", "-c", "kill -9 $$"]), running.env)
    assert killed.returncode == 128 + 9


def test_a_joined_command_cannot_become_root_or_see_the_host(
    sandbox: Sandbox, task: tuple[PreparedTask, subprocess.Popen[bytes]]
) -> None:
    prepared, helper = task
    running = running_task(helper.pid)
    probe = (
        "grep -E '^(Uid|CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; "
        f"kill -0 {os.getpid()} 2>&1 || echo cannot-signal-the-host; "
        "unshare -U true 2>/dev/null || echo no-user-namespace"
    )
    done = _join(_joined(sandbox, prepared, running, ["/bin/sh", "-c", probe]), running.env)
    said = done.stdout.decode()
    fields = dict(line.split(":", 1) for line in said.splitlines() if ":" in line and line[0].isupper())
    assert fields["Uid"].split() == [str(running.uid)] * 4
    assert int(fields["CapEff"], 16) == 0
    assert int(fields["CapBnd"], 16) == 0
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Seccomp"].strip() == "2"
    assert "cannot-signal-the-host" in said  # the test's pid does not exist in there
    assert "no-user-namespace" in said


def test_only_a_tasks_init_is_joined(
    sandbox: Sandbox, task: tuple[PreparedTask, subprocess.Popen[bytes]]
) -> None:
    """The agent names INIT; a pid that is not the task's INIT (its MAIN, or a process
    outside the task) is refused before anything is joined."""
    prepared, helper = task
    running = running_task(helper.pid)
    for wrong in (running.main_pid, os.getpid()):
        fake = RunningTask(wrong, running.main_pid, running.uid, running.gid, running.env)
        done = _join(_joined(sandbox, prepared, fake, ["/bin/sh", "-c", "echo joined"]), running.env)
        assert done.returncode == 125
        assert b"joined" not in done.stdout
        assert b"not a task's init" in done.stderr or b"not in the task's cgroup" in done.stderr


def test_the_join_mode_refuses_the_flags_of_a_tasks_start(
    sandbox: Sandbox, task: tuple[PreparedTask, subprocess.Popen[bytes]]
) -> None:
    prepared, helper = task
    running = running_task(helper.pid)
    argv = _joined(sandbox, prepared, running, ["/bin/true"])
    done = _join([argv[0], "--hide", "/etc", *argv[1:]], running.env)
    assert done.returncode == 125
    assert b"usage: corral-sandbox --join" in done.stderr


def test_a_task_not_running_is_not_joinable(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(NotJoinable, match="no init process"):
            running_task(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
