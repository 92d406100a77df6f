"""Escapes through the sandbox helper itself, each tried for real and shown blocked.

Run through ``Sandbox.prepare`` and ``spawn_sandboxed`` as the node agent does: a job's
environment reaching the root helper, a task holding its job open through its stdout
passed to a process outside its sandbox, a kernel keyring or a user namespace that
outlives the task, a stop sent while the task starts, a task faking the sandbox's own
failure.
"""

from __future__ import annotations

import array
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.launcher.agent.processes import Exit, TaskFiles, spawn_sandboxed
from services.launcher.agent.sandbox.sandbox import Launch, Sandbox
from tests.launcher.sandboxes import prepare_task, sandbox_for_tests

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside /tmp (which a task sees as its own empty tmpfs), root's."""
    directory = Path(tempfile.mkdtemp(prefix="corral-escape-", dir="/var/lib"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def _launch(sandbox: Sandbox, tmp_path: Path, command: str) -> tuple[Launch, TaskFiles, str]:
    task = prepare_task(sandbox, tmp_path, command, memory_mb=256)
    return task.launch, task.files, task.attempt_id


def _run(sandbox: Sandbox, tmp_path: Path, command: str, env: dict[str, str] | None = None) -> str:
    launch, _, attempt = _launch(sandbox, tmp_path, command)
    helper = spawn_sandboxed(launch.argv, {"PATH": "/usr/bin:/bin", **launch.env, **(env or {})})
    helper.wait(60)
    assert sandbox.finish(attempt, f"job-{attempt}")
    return (tmp_path / f"{attempt}.log").read_text()


def test_a_jobs_ld_preload_never_runs_as_root(sandbox: Sandbox, tmp_path: Path, outside: Path) -> None:
    """The job's env is the task's alone: the root helper starts with none."""
    source = outside / "evil.c"
    source.write_text(
        "#include <stdio.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void run(void) {\n"
        f'    char p[256]; snprintf(p, sizeof p, "{outside}/ran-as-%d", (int)geteuid());\n'
        '    FILE *f = fopen(p, "w"); if (f) fclose(f);\n'
        '    fprintf(stderr, "preloaded as %d\\n", (int)geteuid());\n}\n'
    )
    library = outside / "evil.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    said = _run(sandbox, tmp_path, "echo ran", env={"LD_PRELOAD": str(library), "GLIBC_TUNABLES": "x"})
    assert "ran" in said
    assert not (outside / "ran-as-0").exists(), "the job's LD_PRELOAD ran as root"
    assert "preloaded as 0" not in said
    assert "preloaded as 2130" in said  # in the task's own processes, as its own uid: its business


def test_a_stdout_passed_outside_does_not_hold_the_task_open(sandbox: Sandbox, tmp_path: Path) -> None:
    """A process outside the sandbox (here the test) takes the task's stdout over an
    abstract Unix socket and keeps it: the task still ends when its processes do."""
    name = f"\0corral-escape-{uuid.uuid4().hex}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(name)
    listener.listen(1)
    held: list[int] = []

    def hold() -> None:
        conn, _ = listener.accept()
        fds = array.array("i")
        _, ancillary, _, _ = conn.recvmsg(1, socket.CMSG_LEN(fds.itemsize))
        for _level, _type, data in ancillary:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
        held.extend(fds)
        conn.close()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    sender = (
        "import socket; s = socket.socket(socket.AF_UNIX); "
        f"s.connect({name!r}); socket.send_fds(s, [b'x'], [1]); s.close()"
    )
    launch, files, attempt = _launch(sandbox, tmp_path, f'python3 -c "{sender}"; echo gave it away')
    started = time.monotonic()
    helper = spawn_sandboxed(launch.argv, {"PATH": "/usr/bin:/bin", **launch.env})
    try:
        assert helper.wait(20) == 0
        assert time.monotonic() - started < 10
        holder.join(5)
        assert held, "the task handed its stdout out (the attempt this test blocks)"
        assert files.read_exit() == Exit(0, None)
    finally:
        for fd in held:
            os.close(fd)
        listener.close()
        helper.kill()
    assert sandbox.finish(attempt, f"job-{attempt}")


def test_no_keyring_and_no_user_namespace(sandbox: Sandbox, tmp_path: Path) -> None:
    add_key = (
        "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
        "r = libc.syscall(248, b'user', b'k', b'secret', 6, -4); "  # add_key(..., KEY_SPEC_USER_KEYRING)
        "print('add_key', r, os.strerror(ctypes.get_errno()))"
    )
    if os.uname().machine != "x86_64":
        pytest.skip("add_key's number above is x86_64's")
    said = _run(
        sandbox, tmp_path, f'python3 -c "{add_key}"; unshare --user --map-root-user id 2>&1; echo done'
    )
    assert "add_key -1 Operation not permitted" in said, said
    assert "uid=0" not in said, said
    assert "unshare failed: Operation not permitted" in said, said


def test_a_stop_sent_while_the_task_starts_stops_it(sandbox: Sandbox, tmp_path: Path) -> None:
    """SIGTERM at once, or within the first milliseconds: never lost, never waited out."""
    for delay_ms in (0, 0.5, 1, 1.5, 2, 3, 5, 10):
        launch, files, attempt = _launch(sandbox, tmp_path, "sleep 30")
        helper = spawn_sandboxed(launch.argv, {"PATH": "/usr/bin:/bin", **launch.env})
        time.sleep(delay_ms / 1000)
        started = time.monotonic()
        helper.send_signal(signal.SIGTERM)
        code = helper.wait(10)
        assert time.monotonic() - started < 5, f"a stop {delay_ms} ms in was lost: the task ran on"
        # Stopped: by the signal (recorded), or before it started at all (the helper's
        # start-up, before its first instruction, is the only window left).
        assert code in (128 + signal.SIGTERM, -signal.SIGTERM), code
        if code == 128 + signal.SIGTERM:
            assert files.read_exit() == Exit(None, signal.SIGTERM)
        assert sandbox.finish(attempt, f"job-{attempt}")


def test_only_the_helper_says_the_sandbox_failed(sandbox: Sandbox, tmp_path: Path) -> None:
    launch, files, attempt = _launch(
        sandbox, tmp_path, "echo corral-sandbox: could not start the task: lies; exit 125"
    )
    spawn_sandboxed(launch.argv, {"PATH": "/usr/bin:/bin", **launch.env}).wait(30)
    assert files.read_exit() == Exit(125, None, ""), "a task's own words are not the sandbox's"
    assert sandbox.finish(attempt, f"job-{attempt}")

    launch, files, attempt = _launch(sandbox, tmp_path, "true")
    shutil.rmtree(tmp_path / "work" / attempt)  # its working directory gone before it starts
    spawn_sandboxed(launch.argv, {"PATH": "/usr/bin:/bin", **launch.env}).wait(30)
    recorded = files.read_exit()
    assert recorded is not None
    assert recorded.exit_code == 125
    assert str(tmp_path / "work" / attempt) in recorded.reason
    assert recorded.reason.startswith("could not start the task: ")
    assert sandbox.finish(attempt, f"job-{attempt}")


def test_a_readable_checkout_in_a_private_directory_under_tmp(tmp_path: Path) -> None:
    """A checkout (a clone in a private temporary directory) named readable is there,
    read-only, though /tmp is the task's own and its parent is closed to others."""
    checkout = tmp_path / "private" / "corral checkout"
    checkout.mkdir(parents=True)
    (tmp_path / "private").chmod(0o700)
    (checkout / "train.py").write_text("print('from the checkout')\n")
    opened = sandbox_for_tests(tmp_path, readable=(checkout,))
    try:
        said = _run(opened, tmp_path, f"cat '{checkout}/train.py'; touch '{checkout}/x' 2>&1 | head -1")
    finally:
        opened.close()
    assert "print('from the checkout')" in said, said
    assert "Read-only file system" in said, said


def test_a_mount_inside_a_readable_path_is_there_too_and_read_only(tmp_path: Path) -> None:
    """A readable path brings the mounts inside it (as a GPU host's driver, mounted at
    /usr/local/nvidia inside /usr), read-only like the rest: a plain bind would show the
    empty directory beneath instead."""
    readable = tmp_path / "private" / "opt"
    driver = readable / "nvidia"
    driver.mkdir(parents=True)
    (tmp_path / "private").chmod(0o700)  # so the path needs a mount of its own
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(driver)], check=True)
    try:
        (driver / "libcuda.so.1").write_text("the driver\n")
        opened = sandbox_for_tests(tmp_path, readable=(readable,))
        try:
            said = _run(opened, tmp_path, f"cat '{driver}/libcuda.so.1'; touch '{driver}/x' 2>&1 | head -1")
        finally:
            opened.close()
    finally:
        subprocess.run(["umount", str(driver)], check=True)
    assert "the driver" in said, said
    assert "Read-only file system" in said, said


def test_a_task_cannot_change_the_cgroup_tree(sandbox: Sandbox, tmp_path: Path) -> None:
    """The root is read-only and the task unprivileged: no new cgroup to move itself into
    (out of its limits), no limit of its own raised, no process moved."""
    said = _run(
        sandbox,
        tmp_path,
        "mkdir /sys/fs/cgroup/corral-escape 2>&1 | head -1; echo mkdir=$?;"
        " echo max > /sys/fs/cgroup/memory.max 2>&1; echo $$ > /sys/fs/cgroup/cgroup.procs 2>&1;"
        " ls -d /sys/fs/cgroup/corral-escape 2>&1 | head -1",
    )
    assert not Path("/sys/fs/cgroup/corral-escape").exists(), said
    assert "mkdir: cannot create directory" in said, said
    assert said.count("Read-only file system") + said.count("Permission denied") >= 3, said
    assert "No such file or directory" in said, said
