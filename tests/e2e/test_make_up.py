"""`make up` as a user runs it: private Postgres and NATS under $CORRAL_HOME, and a second
start finds every job where the first left it; `CORRAL_SIMULATED_NODES` for a cluster of
simulated nodes on one machine."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from corral.local.ports import free_port
from corral.local.postgres import LocalPostgres
from corral.local.problems import StartupProblem
from corral.local.stack_config import StackConfig
from shared.db.credentials import SERVICE_ROLES, read_secret_file
from tests.e2e.stack import Stack, submit, submit_spec, wait_state
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
        await _each_service_logs_in_as_its_own_role(first, int(servers["CORRAL_PG_PORT"]))
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


async def test_simulated_nodes_take_a_gang_one_task_per_node(
    database_url: str, nats_url: str, tmp_path: Path
) -> None:
    env = {"CORRAL_DATABASE_URL": database_url, "CORRAL_NATS_URL": nats_url, "CORRAL_SIMULATED_NODES": "3"}
    async with Stack(tmp_path / "home", env).running() as stack:
        await stack.wait_nodes_ready(3)
        spread = {
            "name": "spread",
            "topology": "one_per_node",
            "tasks": [{"name": "worker", "instances": 3, "command": "echo $RANK", "resources": {"gpus": 2}}],
        }
        async with stack.client() as http:
            job = await wait_state(http, await submit_spec(http, spread), {"SUCCEEDED"}, timeout_s=60)
        assert sorted(a["node_id"] for a in job["attempts"]) == ["local-1", "local-2", "local-3"]
        assert "3 simulated nodes, local-1 … local-3" in stack.logs("supervisor")

        # Each node has its own fault file: breaking local-2's GPU drains local-2 alone.
        (stack.home / "gpu-faults-local-2.yaml").write_text("gpus:\n  3: {xid: 79}\n")
        async with stack.client() as http:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                nodes = {n["id"]: n["drained"] for n in (await http.get("/api/v1/nodes")).json()["items"]}
                if nodes["local-2"]:
                    break
                await asyncio.sleep(0.2)
        assert nodes == {"local-1": False, "local-2": True, "local-3": False}


async def _each_service_logs_in_as_its_own_role(stack: Stack, pg_port: int) -> None:
    """Its role's login, its password in a file of its own (0600, in a 0700 directory),
    none in any process's environment; and the owner's password in no service's."""
    owner = LocalPostgres(stack.home / "postgres", pg_port)
    conn = await asyncpg.connect(owner.url())
    try:
        rows = await conn.fetch("SELECT usename FROM pg_stat_activity WHERE datname = 'corral'")
    finally:
        await conn.close()
    assert set(SERVICE_ROLES.values()) <= {row["usename"] for row in rows}
    await asyncio.to_thread(_secrets_stay_in_their_files, stack, owner)


def _secrets_stay_in_their_files(stack: Stack, owner: LocalPostgres) -> None:
    credentials = stack.home / "credentials"
    assert credentials.stat().st_mode & 0o777 == 0o700
    files = [credentials / f"postgres-{service}" for service in SERVICE_ROLES] + [
        credentials / "node-local.secret"
    ]
    secrets = [owner.password] + [read_secret_file(path) for path in files]  # (each 0600, or refused)
    for service in ("api", "scheduler", "launcher", "monitor", "alerter", "agent", "exporter"):
        environment = Path(f"/proc/{stack.pid(service)}/environ").read_bytes()
        leaked = [secret for secret in secrets if secret.encode() in environment]
        assert not leaked, f"{service} holds a database secret in its environment"


@pytest.mark.parametrize("given", ["0", "65", "three"])
def test_a_bad_node_count_is_refused_before_anything_starts(
    given: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_SIMULATED_NODES", given)
    with pytest.raises(
        StartupProblem, match=f"CORRAL_SIMULATED_NODES must be a whole number from 1 to 64, got '{given}'"
    ):
        StackConfig.from_environment()


@pytest.mark.parametrize("variable", ["CORRAL_API_PROCESSES", "CORRAL_LAUNCHER_PROCESSES"])
@pytest.mark.parametrize("given", ["0", "17", "two"])
def test_a_bad_process_count_is_refused_before_anything_starts(
    variable: str, given: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, given)
    refusal = f"{variable} must be a whole number from 1 to 16, got '{given}'"
    with pytest.raises(StartupProblem, match=refusal):
        StackConfig.from_environment()


def _listening_on(port: int) -> set[int]:
    """The pids holding a listening TCP socket on ``port`` (from /proc: sockets by inode)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
    holders = set()
    for process in Path("/proc").iterdir():
        if process.name.isdigit():
            with contextlib.suppress(OSError):
                if any(os.readlink(fd) in inodes for fd in (process / "fd").iterdir()):
                    holders.add(int(process.name))
    return holders


async def _until_both_listen(port: int) -> set[int]:
    """The pids listening on ``port`` once two do (each binds it once it is up), or at 20 s."""
    for _ in range(200):
        if len(listening := _listening_on(port)) == 2:
            return listening
        await asyncio.sleep(0.1)
    return _listening_on(port)


async def test_api_processes_share_the_port_and_one_killed_leaves_the_api_answering(
    database_url: str, nats_url: str, tmp_path: Path
) -> None:
    env = {"CORRAL_DATABASE_URL": database_url, "CORRAL_NATS_URL": nats_url, "CORRAL_API_PROCESSES": "2"}
    async with Stack(tmp_path / "home", env).running() as stack:
        both = {stack.pid("api"), stack.pid("api-2")}
        assert len(both) == 2
        assert await _until_both_listen(stack.port) == both

        old = stack.kill("api")
        for _ in range(100):  # until its socket has left the port's group
            if _listening_on(stack.port) == both - {old}:
                break
            await asyncio.sleep(0.05)
        async with stack.client() as http:
            # The other process answers at once, while the supervisor restarts this one.
            job_id = await submit(http, "echo through the other API process")
            await wait_state(http, job_id, {"SUCCEEDED"}, timeout_s=60)
        await stack.wait_restarted("api", old)
        assert await _until_both_listen(stack.port) == {stack.pid("api"), stack.pid("api-2")}
