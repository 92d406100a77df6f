"""A task's storage and /dev/shm, through the real sandbox helper as the node agent runs it.

Storage is a host directory bound at /mnt/NAME (``--bind``): written through and there
on the host, refused when read-only, and nothing else of the host's storage is reachable
(not at /mnt, not at its host path, not by mounting it). ``--shm-mb`` sizes the task's
private /dev/shm. The helper refuses a bind that is not a plain path to /mnt/NAME.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from services.launcher.agent.processes import Exit, TaskFiles, spawn_sandboxed
from services.launcher.agent.sandbox.sandbox import Sandbox
from services.launcher.agent.sandbox.storage import Bind
from shared.jobs import Resources

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")


@pytest.fixture
def storage_root() -> Iterator[Path]:
    """Where an admin keeps hostpath storage: root's alone (0700), outside /tmp (a task's
    own tmpfs), with two storages in it open to whoever reaches them."""
    root = Path(tempfile.mkdtemp(prefix="corral-storage-", dir="/var/lib"))
    root.chmod(0o700)
    for name in ("data", "secret"):
        (root / name).mkdir()
        (root / name).chmod(0o777)
    (root / "secret" / "plans.txt").write_text("other team's\n")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _run(
    sandbox: Sandbox, tmp_path: Path, command: str, binds: Sequence[Bind] = (), shm_mb: int | None = None
) -> tuple[str, Exit | None]:
    """Run ``command`` in a sandboxed task with these mounts: its log and recorded end."""
    attempt = f"att-{uuid.uuid4().hex[:12]}"
    files = TaskFiles.for_attempt(tmp_path / "state", attempt)
    files.pid_file.parent.mkdir(exist_ok=True)
    log = tmp_path / f"{attempt}.log"
    launch = sandbox.prepare(
        attempt_id=attempt,
        job_id=f"job-{attempt}",
        username="alice",
        resources=Resources(cpus=1, memory_mb=256),
        gpu_indices=[],
        workdir=tmp_path / "work" / attempt,
        log_path=log,
        pid_file=files.pid_file,
        exit_file=files.exit_file,
        command=command,
        binds=binds,
        shm_mb=shm_mb,
    )
    spawn_sandboxed(launch.argv, {"PATH": "/usr/bin:/bin", **launch.env}).wait(60)
    assert sandbox.finish(attempt, f"job-{attempt}")
    return log.read_text(), files.read_exit()


def test_a_task_writes_on_its_storage_and_the_file_is_on_the_host(
    sandbox: Sandbox, tmp_path: Path, storage_root: Path
) -> None:
    bind = Bind(storage_root / "data", "/mnt/data", read_only=False)
    said, end = _run(sandbox, tmp_path, "echo checkpoint > /mnt/data/epoch-1; ls /mnt", [bind])
    assert end == Exit(0, None, ""), said
    assert (storage_root / "data" / "epoch-1").read_text() == "checkpoint\n"
    assert (storage_root / "data" / "epoch-1").stat().st_uid >= 2130706432  # the task's dynamic uid
    assert said.split() == ["data"], "only the storage it asked for is at /mnt"


def test_a_read_only_storage_refuses_writes(sandbox: Sandbox, tmp_path: Path, storage_root: Path) -> None:
    (storage_root / "data" / "train.csv").write_text("1,2\n")
    (storage_root / "data" / "train.csv").chmod(0o666)  # only the mount stands in the way
    bind = Bind(storage_root / "data", "/mnt/data", read_only=True)
    said, end = _run(
        sandbox,
        tmp_path,
        "cat /mnt/data/train.csv; touch /mnt/data/new 2>&1; rm -f /mnt/data/train.csv 2>&1;"
        " mount -o remount,rw /mnt/data 2>&1 | head -1; echo x >> /mnt/data/train.csv",
        [bind],
    )
    assert "1,2" in said, said
    assert said.count("Read-only file system") == 3, said
    assert "must be superuser" in said, said
    assert end is not None
    assert end.exit_code != 0, said
    assert sorted(p.name for p in (storage_root / "data").iterdir()) == ["train.csv"]
    assert (storage_root / "data" / "train.csv").read_text() == "1,2\n"


def test_a_task_cannot_reach_storage_it_did_not_ask_for(
    sandbox: Sandbox, tmp_path: Path, storage_root: Path
) -> None:
    """Not at /mnt, not at its host path (the admin's 0700 root), not by mounting it."""
    bind = Bind(storage_root / "data", "/mnt/data", read_only=False)
    secret = storage_root / "secret"
    said, _ = _run(
        sandbox,
        tmp_path,
        f"ls /mnt/secret 2>&1; cat {secret}/plans.txt 2>&1; mkdir -p /tmp/m;"
        f" mount --bind {secret} /tmp/m 2>&1; ls /tmp/m; ls -a /mnt",
        [bind],
    )
    assert "other team's" not in said, said
    assert "ls: cannot access '/mnt/secret': No such file or directory" in said, said
    assert "Permission denied" in said, said
    assert "must be superuser" in said or "Operation not permitted" in said, said
    assert said.split()[-3:] == [".", "..", "data"], said

    said, _ = _run(sandbox, tmp_path, f"cat {secret}/plans.txt 2>&1; ls /mnt")  # no storage at all
    assert "other team's" not in said, said
    assert "Permission denied" in said, said


def test_dev_shm_has_the_size_asked_for(sandbox: Sandbox, tmp_path: Path) -> None:
    said, end = _run(sandbox, tmp_path, "df -m /dev/shm | tail -1", shm_mb=96)
    assert end == Exit(0, None, ""), said
    fields = said.split()
    assert (fields[0], fields[1], fields[-1]) == ("tmpfs", "96", "/dev/shm"), said

    said, _ = _run(sandbox, tmp_path, "df -m /dev/shm | tail -1")  # the default stays tmpfs's own
    assert said.split()[1] != "96", said


@pytest.mark.parametrize(
    "bind",
    [
        "/srv/data:/etc/data:rw",  # not under /mnt
        "/srv/data:/mnt:rw",
        "/srv/data:/mnt/a/b:rw",
        "/srv/../etc:/mnt/data:rw",
        "srv/data:/mnt/data:rw",
        "/srv/data:/mnt/..:ro",
        "/srv/data:/mnt/data:rx",
        "/srv/data:/mnt/data",
    ],
)
def test_the_helper_refuses_a_bind_that_is_not_plain(sandbox: Sandbox, tmp_path: Path, bind: str) -> None:
    done = subprocess.run(
        [str(sandbox.helper), "--bind", bind, "--", "/bin/true"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 125, done
    assert "--bind" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "flags", [["--shm-mb", "0"], ["--shm-mb", "64k"], ["--join", "5", "--bind", "/a:/mnt/a:ro"]]
)
def test_the_helper_refuses_a_bad_shm_size_and_mounts_in_a_join(sandbox: Sandbox, flags: list[str]) -> None:
    done = subprocess.run(
        [str(sandbox.helper), *flags, "--", "/bin/true"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 125, done
    assert "Invalid argument" in done.stderr, done.stderr


def test_a_bind_is_checked_before_the_helper_sees_it() -> None:
    for source, target in [("/a/../b", "/mnt/x"), ("/a", "/mnt/x/y"), ("/a", "/opt/x"), ("/a:b", "/mnt/x")]:
        with pytest.raises(ValueError, match=r"path|source"):
            Bind(Path(source), target, read_only=False)
    assert Bind(Path("/srv/d"), "/mnt/d", read_only=True).argument == "/srv/d:/mnt/d:ro"
