"""A task's dynamic uid has a name and a home inside its sandbox, and nothing else
sees that account: the node's /etc/passwd stays as it was, and the task cannot change
its own view of it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from services.launcher.agent.processes import TaskFiles, spawn_sandboxed
from services.launcher.agent.sandbox.accounts import (
    AccountEntryProblem,
    account_files_beside,
    group_with,
    passwd_with,
)
from services.launcher.agent.sandbox.identities import Identity
from services.launcher.agent.sandbox.sandbox import Sandbox
from tests.launcher.sandboxes import PreparedTask, prepare_task

HOST = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n"
TASK = Identity(2130743621, 2130743621, "corral-2130743621")


def test_the_task_line_is_appended_with_its_home_and_shell() -> None:
    text = passwd_with(HOST, TASK, Path("/work/job-1"))
    assert text == HOST + "corral-2130743621:x:2130743621:2130743621:Corral task:/work/job-1:/bin/sh\n"


def test_a_host_file_without_a_final_newline_keeps_its_last_line() -> None:
    text = passwd_with(HOST.rstrip("\n"), TASK, Path("/w"))
    assert text is not None
    added = f"{TASK.name}:x:{TASK.uid}:{TASK.gid}:Corral task:/w:/bin/sh"
    assert text.splitlines()[1:] == ["alice:x:1000:1000::/home/alice:/bin/sh", added]


def test_a_uid_or_gid_the_host_lists_gets_no_line() -> None:
    alice = Identity(1000, 1000, "alice")
    assert passwd_with(HOST, alice, Path("/home/alice")) is None
    assert group_with("alice:x:1000:\n", alice) is None
    assert group_with("alice:x:1000:\n", TASK) == f"alice:x:1000:\n{TASK.name}:x:{TASK.gid}:\n"


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("evil:x:0:0::/:/bin/sh", "/work"),
        ("corral-1\nroot2:x:0:0::/:/bin/sh", "/work"),
        ("", "/work"),
        ("corral-1", "/work/a:b"),
        ("corral-1", "/work/a\nroot2:x:0:0::/:/bin/sh"),
    ],
)
def test_a_separator_or_line_break_is_refused_not_written(name: str, home: str) -> None:
    with pytest.raises(AccountEntryProblem):
        passwd_with(HOST, Identity(2130743621, 2130743621, name), Path(home))


def test_the_group_name_is_checked_too() -> None:
    with pytest.raises(AccountEntryProblem):
        group_with(HOST, Identity(5, 2130743621, "a:b"))


def test_task_files_remove_takes_the_account_files_too(tmp_path: Path) -> None:
    files = TaskFiles.for_attempt(tmp_path, "att-1")
    for path in (files.pid_file, *account_files_beside(files.pid_file)):
        path.write_text("x")
    files.remove()
    assert list(tmp_path.iterdir()) == []


# --- through the real sandbox -------------------------------------------------------

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")


def _run(sandbox: Sandbox, tmp_path: Path, command: str) -> tuple[PreparedTask, str]:
    task = prepare_task(sandbox, tmp_path, command)
    helper = spawn_sandboxed(task.launch.argv, {"PATH": "/usr/bin:/bin", **task.launch.env})
    assert helper.wait(60) == 0, task.log.read_text()
    return task, task.log.read_text()


@root_only
def test_a_task_sees_its_own_name_and_home(sandbox: Sandbox, tmp_path: Path) -> None:
    task, said = _run(
        sandbox, tmp_path, 'id -un; id -gn; getent passwd "$(id -u)"; echo "$HOME"; cd ~ && pwd'
    )
    identity, workdir = task.launch.identity, tmp_path / "work" / task.attempt_id
    assert said.splitlines() == [
        identity.name,
        identity.name,
        f"{identity.name}:x:{identity.uid}:{identity.gid}:Corral task:{workdir}:/bin/sh",
        str(workdir),
        str(workdir),
    ]
    # The copies live in the agent's state (hidden from the task) until the task is done.
    assert all(path.exists() for path in account_files_beside(task.files.pid_file))
    assert sandbox.finish(task.attempt_id, task.job_id)
    assert not any(path.exists() for path in account_files_beside(task.files.pid_file))


@root_only
def test_a_task_cannot_change_the_account_files_it_sees(sandbox: Sandbox, tmp_path: Path) -> None:
    before = hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest()
    task, said = _run(
        sandbox,
        tmp_path,
        "for f in /etc/passwd /etc/group; do"
        " (echo 'root2:x:0:0::/:/bin/sh' >> $f) 2>/dev/null && echo wrote $f || echo refused $f; done;"
        " grep -c root2 /etc/passwd; true",
    )
    assert said.splitlines() == ["refused /etc/passwd", "refused /etc/group", "0"]
    assert hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest() == before
    assert task.launch.identity.name not in Path("/etc/passwd").read_text()
    for path in account_files_beside(task.files.pid_file):  # only root may write the copies
        assert path.stat().st_uid == 0
        assert path.stat().st_mode & 0o777 == 0o644
    assert sandbox.finish(task.attempt_id, task.job_id)


@root_only
def test_a_write_is_refused_by_the_kernel_not_by_permissions_alone(sandbox: Sandbox, tmp_path: Path) -> None:
    """The bind is read-only: even the file's owner could not write it through it."""
    task, said = _run(sandbox, tmp_path, "grep ' /etc/passwd ' /proc/self/mountinfo")
    options = said.split()[5].split(",")
    assert {"ro", "nosuid", "nodev", "noexec"} <= set(options), said
    assert sandbox.finish(task.attempt_id, task.job_id)
