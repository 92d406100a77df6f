"""Real HTTP receivers on loopback for alert-delivery tests: they record what they are
sent, and the path chooses how they answer (``hang`` until released, ``bad`` 400,
``flaky`` 503 twice, ``broken`` 500 twice, ``gone`` 410, ``pd`` 202, anything else 200).
``raw`` keeps each request's headers and exact body, for signature checks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from corral.local.ports import free_port


@dataclass
class Receivers:
    """A real HTTP server that records what it is sent; paths choose how it answers."""

    port: int
    seen: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    seen_at: list[float] = field(default_factory=list)
    raw: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    failures_left: dict[str, int] = field(default_factory=lambda: {"flaky": 2, "broken": 2})
    release: asyncio.Event = field(default_factory=asyncio.Event)  # ends every hanging request

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [body for p, body in self.seen if p == path]

    async def handle(self, request: Request) -> JSONResponse:
        path = request.path_params["path"]
        body = await request.body()
        self.raw.append((path, dict(request.headers), body))
        self.seen.append((path, await request.json()))
        self.seen_at.append(time.time())
        if path == "hang":
            await self.release.wait()
        if path == "bad":
            return JSONResponse({"error": "invalid routing key"}, status_code=400)
        if path == "flaky" and self.failures_left["flaky"] > 0:
            self.failures_left["flaky"] -= 1
            return JSONResponse({"error": "try later"}, status_code=503)
        if path == "broken" and self.failures_left["broken"] > 0:
            self.failures_left["broken"] -= 1
            return JSONResponse({"error": "oops"}, status_code=500)
        if path == "gone":
            return JSONResponse({"error": "no such hook"}, status_code=410)
        return JSONResponse({"status": "success"}, status_code=202 if path == "pd" else 200)


@pytest.fixture
async def receivers() -> AsyncIterator[Receivers]:
    recv = Receivers(free_port())
    app = Starlette(routes=[Route("/{path}", recv.handle, methods=["POST"])])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=recv.port, log_level="warning", lifespan="off")
    )
    serving = asyncio.create_task(server.serve())
    async with httpx.AsyncClient() as http:
        for _ in range(100):
            try:
                await http.post(recv.url("warmup"), json={})
                break
            except httpx.TransportError:
                await asyncio.sleep(0.05)
    recv.seen.clear()
    recv.seen_at.clear()
    recv.raw.clear()
    yield recv
    recv.release.set()  # hanging requests end, so the server can stop gracefully
    server.should_exit = True
    await serving
