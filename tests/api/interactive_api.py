"""The API on a real port with a stand-in node and a web app, for the interactive tests
(``api_and_node``), and what those tests do with it: jobs and attempts written into
Postgres as the scheduler and launcher leave them, sessions asked for and connected.

The node's side is ``ScriptedNode`` (interactive_stand_ins.py), a labelled stand-in for
the agent built on the real ``StreamEnd``; the agent itself is tested in tests/launcher
and end to end in tests/e2e/test_interactive.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Subprotocol

from corral.local.ports import free_port
from services.api.app import create_app
from services.api.settings import ApiSettings, Settings
from services.api.tenants.auth import hash_token, upsert_token
from services.api.tenants.repository import TenantRepository
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.ids import new_job_id
from shared.interactive.protocol import KUBERNETES_SUBPROTOCOL
from shared.service import Health
from tests.api.interactive_stand_ins import EchoApp, ScriptedNode

NODE = "node-t"
ALICE = "crl_alice"  # a test user's token
SUBPROTOCOL = Subprotocol(KUBERNETES_SUBPROTOCOL)


@dataclass
class ApiAndNode:
    url: str
    http: httpx.AsyncClient  # as alice, who has the exec scope
    admin: httpx.AsyncClient
    bob: httpx.AsyncClient
    node: ScriptedNode
    app: EchoApp
    db: Database
    server: uvicorn.Server
    serving: asyncio.Task[None]
    admin_token: str

    def ws_url(self, created: dict[str, Any]) -> str:
        return self.url.replace("http://", "ws://") + str(created["stream_url"])


def client_as(url: str, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"})


@pytest.fixture(name="api_and_node")
async def api_and_node_fixture(db: Database, bus: NatsBus, admin_token: str) -> AsyncIterator[ApiAndNode]:
    settings = Settings(api=ApiSettings(interactive_open_timeout_s=2.0, interactive_idle_timeout_s=600))
    app = create_app(db, Health("api", {}), settings, nats=bus.nc)
    tenants = TenantRepository(db)
    await upsert_token(tenants, "tok-alice", "alice", hash_token("crl_alice"), "user", "alice")
    await upsert_token(tenants, "tok-bob", "bob", hash_token("crl_bob"), "user", "bob")
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    serving = asyncio.create_task(server.serve())
    node, echo = ScriptedNode(bus.nc, NODE), EchoApp()
    await node.start()
    await echo.start()
    url = f"http://127.0.0.1:{port}"
    async with (
        client_as(url, "crl_alice") as alice,
        client_as(url, admin_token) as admin,
        client_as(url, "crl_bob") as bob,
    ):
        for _ in range(200):
            if server.started:
                break
            await asyncio.sleep(0.02)
        yield ApiAndNode(url, alice, admin, bob, node, echo, db, server, serving, admin_token)
    server.should_exit = True
    await serving
    await node.stop()
    await echo.stop()


async def running_job(
    s: ApiAndNode,
    *,
    user: str = "alice",
    state: str = "RUNNING",
    attempt: str = "RUNNING",
    prefix: str = "strip",
) -> str:
    """A job of two ``main`` tasks with an ``http`` port; task main-0 has an attempt on NODE
    whose port is the echo app's."""
    job_id = new_job_id()
    task = {"name": "main", "instances": 2, "command": "serve", "ports": {"http": 1}, "proxy_prefix": prefix}
    await s.db.execute(
        "INSERT INTO api.jobs (id, name, username, virtual_cluster, spec, total_gpus, state)"
        " VALUES ($1, 'nb', $2, 'default', $3, 0, $4)",
        job_id,
        user,
        {"name": "nb", "tasks": [task]},
        state,
    )
    await s.db.execute(
        "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no, node_id,"
        " gpu_indices, state, ports) VALUES ($1, $2, 0, 'main', 0, 1, $3, '{}', $4, $5)",
        f"att-{job_id}",
        job_id,
        NODE,
        attempt,
        {"http": [s.app.port]},
    )
    return job_id


async def session(
    s: ApiAndNode, job_id: str, client: httpx.AsyncClient | None = None, **body: Any
) -> dict[str, Any]:
    created = await (client or s.http).post(f"/api/v1/jobs/{job_id}/sessions", json={"kind": "exec", **body})
    assert created.status_code == 201, created.text
    return dict(created.json())


def ws(
    s: ApiAndNode, created: dict[str, Any], token: str = ALICE, subprotocols: tuple[str, ...] = (SUBPROTOCOL,)
) -> Any:
    return connect(
        s.ws_url(created),
        subprotocols=[Subprotocol(p) for p in subprotocols],
        additional_headers={"Authorization": f"Bearer {token}"},
    )


async def refused(s: ApiAndNode, created: dict[str, Any], token: str = ALICE) -> str:
    """The detail of the 403 a WebSocket connect gets."""
    with pytest.raises(InvalidStatus) as caught:
        async with ws(s, created, token):
            pass
    assert caught.value.response.status_code == 403
    return str(json.loads(caught.value.response.body or b"{}")["detail"])


async def closed_with(conn: ClientConnection) -> tuple[int, str]:
    """The close code and reason the server ends the WebSocket with (after any frames)."""
    try:
        while True:
            await conn.recv()
    except ConnectionClosed as closed:
        frame = closed.rcvd
    return (frame.code, frame.reason) if frame is not None else (0, "no close frame")


async def audited(s: ApiAndNode, job_id: str, count: int) -> list[dict[str, Any]]:
    """The job's audit rows (``GET /api/v1/sessions``) once ``count`` of them are closed:
    the API writes a row's close just after its close frame, so a client that has seen the
    frame may read the row a moment before it."""
    async with asyncio.timeout(5):
        while True:
            rows: list[dict[str, Any]] = (
                await s.http.get("/api/v1/sessions", params={"job_id": job_id})
            ).json()["items"]
            if sum(r["close_reason"] is not None for r in rows) >= count:
                return rows
            await asyncio.sleep(0.05)
