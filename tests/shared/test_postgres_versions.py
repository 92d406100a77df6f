"""Every PostgreSQL this machine can run Corral on: the one Corral ships (18, which the
rest of the suite uses) and the system's (15 on our machines). Each runs the migrations
and yields the committed schema."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.local.pg_install import PostgresInstall, candidates, choose_install
from corral.local.ports import free_port
from corral.local.postgres import LocalPostgres
from tests.infra import world_readable_tempdir
from tests.schema_snapshot import SNAPSHOT, migrated_schema


def _installs() -> list[PostgresInstall]:
    by_major: dict[int, PostgresInstall] = {}
    for install in candidates():
        by_major.setdefault(install.major, install)
    return list(by_major.values())


def test_corral_ships_postgresql_18_and_prefers_it() -> None:
    preferred = choose_install()
    assert preferred.shipped
    assert preferred.major == 18


@pytest.fixture(params=_installs(), ids=lambda install: f"pg{install.major}")
def server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalPostgres]:
    install: PostgresInstall = request.param
    monkeypatch.setenv("CORRAL_PG_BINDIR", str(install.bindir))  # its pg_dump too
    directory = world_readable_tempdir(f"corral-pg{install.major}-")
    postgres = LocalPostgres(directory, free_port())
    postgres.start(log_file=directory / "postgres.log")
    try:
        assert postgres.install is not None
        assert postgres.install.major == install.major
        yield postgres
    finally:
        postgres.stop()
        shutil.rmtree(directory, ignore_errors=True)


async def test_the_migrations_yield_the_committed_schema(server: LocalPostgres) -> None:
    base_url = server.url("postgres").rsplit("/", 1)[0] + "/"
    assert await migrated_schema(base_url) == SNAPSHOT.read_text()


def test_a_data_directory_is_opened_by_its_own_major_version(tmp_path: Path) -> None:
    for install in _installs():
        data = tmp_path / f"pg{install.major}"
        data.mkdir()
        (data / "PG_VERSION").write_text(f"{install.major}\n")
        assert choose_install(data).major == install.major


def test_the_shipped_binaries_run_from_a_copy(tmp_path: Path) -> None:
    """For an account that cannot reach a private checkout's virtualenv, the shipped
    PostgreSQL is copied elsewhere once, and the copy finds its own libraries."""
    shipped = next(install for install in candidates() if install.shipped)
    copy = shipped.copied_under(tmp_path)
    assert copy.bindir.is_relative_to(tmp_path)
    assert copy.copied_under(tmp_path) == copy  # once: a second call finds it
    for program in ("postgres", "initdb", "pg_dump"):
        done = subprocess.run([copy.binary(program), "--version"], capture_output=True, text=True, check=True)
        assert "18." in done.stdout
    linked = subprocess.run(["ldd", copy.binary("initdb")], capture_output=True, text=True, check=True).stdout
    libpq = next(line for line in linked.splitlines() if "libpq" in line)
    assert str(tmp_path) in libpq, linked  # its own libpq, not the virtualenv's
