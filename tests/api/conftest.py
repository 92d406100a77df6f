"""The API served in-process over ASGI, on a real database; and on a real port, with its
event hub on real NATS (``api``), for streams and commands."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn

from corral.local.ports import free_port
from services.api.app import create_app
from services.api.auth import bootstrap_admin, hash_token, load_or_create_admin_token
from services.api.event_hub import EventHub
from services.api.event_scope import Scopes
from services.api.repository import ApiRepository
from services.api.settings import ApiSettings, Settings
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.service import Health


@pytest.fixture
async def admin_token(db: Database, tmp_path: Path) -> str:
    path = tmp_path / "admin-token"
    await bootstrap_admin(ApiRepository(db), path)
    return load_or_create_admin_token(path)


@pytest.fixture
async def client(db: Database, admin_token: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(api=ApiSettings(max_body_bytes=64 * 1024))
    app = create_app(ApiRepository(db), Health("api", {"postgres": db.ping}), settings)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport,
        base_url="http://corral.test",
        headers={"Authorization": f"Bearer {admin_token}"},
    ) as http:
        yield http


@dataclass
class Api:
    url: str
    hub: EventHub
    admin: str  # tokens
    alice: str


@pytest.fixture
async def api(db: Database, bus: NatsBus, admin_token: str) -> AsyncIterator[Api]:
    """The API with its event hub, served on a real port."""
    settings = Settings(api=ApiSettings(sse_keepalive_s=0.3, sse_queue_limit=10, sse_reauth_s=0.3))
    hub = EventHub(bus.js, Scopes(db), settings.api.sse_queue_limit)

    async def ask_node(subject: str, question: bytes) -> bytes:  # as the service asks nodes
        return await bus.request(subject, question, 2.0)

    app = create_app(ApiRepository(db), Health("api", {}), settings, None, hub, ask_node)
    await ApiRepository(db).upsert_token("tok-alice", "alice", hash_token("crl_alice"), "user", "alice")
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", timeout_graceful_shutdown=2
        )
    )
    hub_task, serving = asyncio.create_task(hub.run()), asyncio.create_task(server.serve())
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as http:
        for _ in range(200):
            with contextlib.suppress(httpx.TransportError):
                if (await http.get(url + "/healthz")).status_code == 200:
                    break
            await asyncio.sleep(0.05)
    assert await hub.wait_ready(5.0)
    yield Api(url, hub, admin_token, "crl_alice")
    server.should_exit = True
    await serving
    hub_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await hub_task
