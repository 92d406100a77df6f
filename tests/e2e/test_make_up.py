"""`make up` as a user runs it: private Postgres and NATS under $CORRAL_HOME, and a second
start finds every job where the first left it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.local.ports import free_port
from tests.e2e.stack import Stack, submit, wait_state
from tests.infra import world_readable_tempdir


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    # As root, the private Postgres runs as an unprivileged user, who must reach its dir
    # (pytest's own temp dirs are private to root); removed afterwards either way.
    path = world_readable_tempdir("corral-home-") if os.geteuid() == 0 else tmp_path / "home"
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_a_second_start_finds_every_job_where_it_was_left(home: Path) -> None:
    servers = {"CORRAL_PG_PORT": str(free_port()), "CORRAL_NATS_PORT": str(free_port())}
    first = Stack(home, servers)
    first.start()
    try:
        await first.wait_ready()
        async with first.client() as http:
            job_id = await submit(http, "echo kept")
            await wait_state(http, job_id, {"SUCCEEDED"}, timeout_s=60)
    finally:
        assert first.stop() == 0
    token = first.token()
    assert (home / "postgres" / "data" / "PG_VERSION").exists()
    assert "Corral stopped." in first.logs("supervisor")

    second = Stack(home, servers)
    second.start()
    try:
        await second.wait_ready()
        assert second.token() == token, "the admin token survives a restart"
        async with second.client() as http:
            job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
            assert job["state"] == "SUCCEEDED"
            assert (await http.get(f"/api/v1/jobs/{job_id}/logs")).text == "kept\n"
            again = await submit(http, "echo new")
            await wait_state(http, again, {"SUCCEEDED"}, timeout_s=60)
    finally:
        assert second.stop() == 0
