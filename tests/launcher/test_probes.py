"""Readiness and liveness probes of service tasks, by a node agent on real Postgres with
real processes: a replica is ready once its server answers, not ready while it answers
503, and stopped (liveness_failed) when its liveness probe keeps failing. A node may set
the readiness of its own running attempts only."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from services.launcher.agent.agent import NodeAgent
from services.launcher.agent.probes import http_get, tcp_connect
from services.launcher.agent.repository import NodeRepository
from services.launcher.agent.sandbox.sandbox import Sandbox
from shared.db.pool import Database
from shared.ids import new_attempt_id, new_job_id
from tests.launcher import attempts
from tests.launcher.sandboxes import sandbox_for_tests

NODE = "gpu-3"
CHANGED_AT = "SELECT ready_changed_at FROM launcher.attempts WHERE id = $1"
DETAIL = "SELECT ready_detail FROM launcher.attempts WHERE id = $1"

# A replica: listens on its http port after a moment; /healthz and /live answer the
# status written in the files health and live of its working directory (200 without).
SERVER = """
import os, time
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        name = {"/healthz": "health", "/live": "live"}.get(self.path, "")
        status = int(open(name).read()) if name and os.path.exists(name) else 200
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

time.sleep(0.3)
HTTPServer(("127.0.0.1", int(os.environ["CORRAL_PORT_HTTP"])), Handler).serve_forever()
"""


async def service_attempt(
    db: Database, tmp_path: Path, service: dict[str, Any], port: int, command: str | None = None
) -> tuple[str, str]:
    """A replica's job (kind: service) with an ASSIGNED attempt on NODE; (job, attempt).
    Its command is the replica's server (SERVER) unless ``command`` says otherwise."""
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    command = command or f"{sys.executable} {script}"
    task = {"name": "main", "instances": 1, "command": command, "ports": {"http": 1}}
    spec = {"name": "svc", "kind": "service", "service": {"port": "http", **service}, "tasks": [task]}
    job_id, attempt_id = new_job_id(), new_attempt_id()
    await db.execute(
        "INSERT INTO api.jobs (id, name, username, virtual_cluster, spec, total_gpus, state, generation)"
        " VALUES ($1, 'svc', 'alice', 'default', $2, 0, 'SCHEDULED', 1)",
        job_id,
        spec,
    )
    await db.execute(
        "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no, node_id,"
        " gpu_indices, state, ports) VALUES ($1, $2, 1, 'main', 0, 1, $3, '{}', 'ASSIGNED', $4)",
        attempt_id,
        job_id,
        NODE,
        {"http": [port]},
    )
    return job_id, attempt_id


@asynccontextmanager
async def running_agent(
    db: Database, tmp_path: Path, sandbox: Sandbox | None = None
) -> AsyncIterator[NodeAgent]:
    """A node agent for NODE; every task it still runs is killed at the end."""
    await attempts.known_nodes(db, NODE)
    async with asyncio.TaskGroup() as tg:
        node = NodeAgent(
            db,
            tg,
            node_id=NODE,
            log_dir=tmp_path / "logs",
            state_dir=tmp_path / "state",
            work_dir=tmp_path / "work",
            stop_grace_s=0.5,
            sandbox=sandbox,
        )
        await node.register(lease_s=30)
        yield node
        node.fence_all("the test ended")


async def until(check: Callable[[], Awaitable[Any]], what: str, timeout_s: float = 8.0) -> Any:
    for _ in range(int(timeout_s / 0.05)):
        if found := await check():
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout_s} s")


def free_port() -> int:
    from corral.local.ports import free_port as pick

    return pick()


async def test_a_replica_is_ready_while_its_probe_passes(db: Database, tmp_path: Path) -> None:
    probe = {"path": "/healthz", "period_s": 0.1, "timeout_s": 0.5, "failure_threshold": 2}
    job_id, attempt_id = await service_attempt(db, tmp_path, {"readiness": probe}, free_port())
    health = tmp_path / "work" / job_id / "health"

    async def readiness() -> tuple[bool, str]:
        row = await db.fetchrow("SELECT ready, ready_detail FROM launcher.attempts WHERE id = $1", attempt_id)
        assert row is not None
        return row["ready"], row["ready_detail"]

    async with running_agent(db, tmp_path) as agent:
        await agent.start_attempt(attempt_id)
        # Not ready before its server listens (the probe's word says why), ready once it answers.
        assert await until(lambda: _is(readiness, (False, "connection refused")), "not ready yet")
        assert await until(lambda: _is(readiness, (True, "GET /healthz: 200")), "ready")
        changed_at = await db.fetchval(CHANGED_AT, attempt_id)
        await asyncio.sleep(0.3)  # three more passing probes: nothing written
        assert await db.fetchval(CHANGED_AT, attempt_id) == changed_at
        health.write_text("503")
        assert await until(lambda: _is(readiness, (False, "GET /healthz: 503")), "out of rotation on 503")
        health.write_text("200")
        assert await until(lambda: _is(readiness, (True, "GET /healthz: 200")), "back in rotation")


async def test_without_a_readiness_probe_a_replica_is_ready_once_it_listens(
    db: Database, tmp_path: Path
) -> None:
    port = free_port()
    _, attempt_id = await service_attempt(db, tmp_path, {}, port)

    async def ready() -> str | None:
        row = await db.fetchrow("SELECT ready, ready_detail FROM launcher.attempts WHERE id = $1", attempt_id)
        return row["ready_detail"] if row and row["ready"] else None

    async with running_agent(db, tmp_path) as agent:
        await agent.start_attempt(attempt_id)
        assert await until(ready, "ready") == f"port {port} accepts connections"


async def test_a_failing_liveness_probe_stops_the_task(db: Database, tmp_path: Path) -> None:
    probe = {
        "path": "/live",
        "period_s": 0.1,
        "timeout_s": 0.5,
        "failure_threshold": 3,
        "initial_delay_s": 0.5,
    }
    job_id, attempt_id = await service_attempt(db, tmp_path, {"liveness": probe}, free_port())
    (tmp_path / "work" / job_id).mkdir(parents=True)
    (tmp_path / "work" / job_id / "live").write_text("500")

    async def ended() -> asyncpg.Record | None:
        row = await db.fetchrow(
            "SELECT state, reason, classification FROM launcher.attempts WHERE id = $1", attempt_id
        )
        return row if row and row["state"] == "EXITED" else None

    async with running_agent(db, tmp_path) as agent:
        await agent.start_attempt(attempt_id)
        row = await until(ended, "the task's end")
        assert row["reason"] == "liveness probe failed 3 times: GET /live: 500"
        assert row["classification"] == "unknown"
        assert agent.probes._running == {}  # its probes stopped with it


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")
async def test_a_port_another_process_listens_on_is_never_ready(db: Database, tmp_path: Path) -> None:
    """Another tenant's server on the replica's port before the replica binds it: the
    probes see it is not the task's, and send it nothing."""
    port = free_port()
    log_path = tmp_path / "stranger.log"
    with log_path.open("wb") as log:
        stranger = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", stdout=log, stderr=log
        )
    try:
        await until(lambda: _accepts(port), "the stranger to listen")
        probe = {"path": "/", "period_s": 0.1}
        _, attempt_id = await service_attempt(db, tmp_path, {"readiness": probe}, port, command="sleep 600")
        sandbox = sandbox_for_tests(tmp_path)
        try:
            async with running_agent(db, tmp_path, sandbox) as agent:
                await agent.start_attempt(attempt_id)

                async def detail() -> str:
                    return str(await db.fetchval(DETAIL, attempt_id))

                wanted = f"port {port} is held by another process"
                assert await until(lambda: _equals(detail, wanted), "the probe to see the stranger")
                assert (
                    await db.fetchval("SELECT ready FROM launcher.attempts WHERE id = $1", attempt_id)
                    is False
                )
        finally:
            sandbox.close()
    finally:
        stranger.terminate()
        await stranger.wait()
    assert "GET /" not in log_path.read_text()  # no probe reached it


async def _accepts(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


async def _equals(read: Callable[[], Awaitable[str]], wanted: str) -> bool:
    return await read() == wanted


async def test_a_node_sets_the_readiness_of_its_own_running_attempts_only(db: Database) -> None:
    await attempts.known_nodes(db, NODE, "gpu-9")
    (running,) = await attempts.assigned(db, NODE, instances=1, state="RUNNING")
    (assigned,) = await attempts.assigned(db, NODE, instances=1)
    (elsewhere,) = await attempts.assigned(db, "gpu-9", instances=1, state="RUNNING")
    mine = NodeRepository(db, NODE, None)
    assert await mine.set_readiness(running, True, "GET /: 200") is True
    assert await mine.set_readiness(assigned, True, "GET /: 200") is False  # not running: nothing changes
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await mine.set_readiness(elsewhere, True, "GET /: 200")
    rows = await db.fetch(
        "SELECT id, ready FROM launcher.attempts WHERE id = ANY($1) ORDER BY id",
        [running, assigned, elsewhere],
    )
    assert {r["id"]: r["ready"] for r in rows} == {running: True, assigned: False, elsewhere: False}


async def test_probes_say_what_they_saw() -> None:
    port = free_port()
    assert (await tcp_connect(port, 0.5)).detail == "connection refused"

    given_up = asyncio.Event()

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accepts, never answers (until the prober gives up and closes)
        writer.close()
        given_up.set()

    server = await asyncio.start_server(hang, "127.0.0.1", port)
    async with server:
        slow = await http_get(port, "/healthz", 0.2)
        assert (slow.passed, slow.detail) == (False, "GET /healthz: no answer within 0.2 s")
        await given_up.wait()


# A server whose status line never ends: 100 KiB without a newline, more than a stream
# reader holds (64 KiB), then silence until the prober closes.
ENDLESS_STATUS_LINE = """
import os, socket
server = socket.create_server(("127.0.0.1", int(os.environ["CORRAL_PORT_HTTP"])))
while True:
    conn, _ = server.accept()
    try:
        conn.sendall(b"HTTP/1.1 200 " + b"x" * 100 * 1024)
        conn.recv(1)
    except OSError:
        pass
    conn.close()
"""


async def test_a_status_line_past_the_readers_limit_fails_the_probe_and_the_agent_goes_on(
    db: Database, tmp_path: Path
) -> None:
    script = tmp_path / "endless.py"
    script.write_text(ENDLESS_STATUS_LINE)
    probe = {"path": "/healthz", "period_s": 0.1, "timeout_s": 1.0, "failure_threshold": 1}
    liveness = {**probe, "failure_threshold": 100}
    _, attempt_id = await service_attempt(
        db,
        tmp_path,
        {"readiness": probe, "liveness": liveness},
        free_port(),
        command=f"{sys.executable} {script}",
    )

    async def detail() -> str:
        return str(await db.fetchval(DETAIL, attempt_id))

    async with running_agent(db, tmp_path) as agent:
        await agent.start_attempt(attempt_id)
        wanted = "GET /healthz: not an HTTP answer"
        assert await until(lambda: _equals(detail, wanted), "the probe to fail")
        await asyncio.sleep(0.5)  # several more probes of both kinds, each refused the same way
        probes = agent.probes._running[attempt_id]
        assert [p.done() for p in probes] == [False, False]  # both probes still at work
        assert await db.fetchval("SELECT ready FROM launcher.attempts WHERE id = $1", attempt_id) is False
        assert await db.fetchval("SELECT state FROM launcher.attempts WHERE id = $1", attempt_id) == "RUNNING"


async def _is(read: Callable[[], Awaitable[tuple[bool, str]]], wanted: tuple[bool, str]) -> bool:
    return await read() == wanted
