"""The two integrators of a chaos run: an SSE subscriber and a webhook receiver.

``EventWatcher`` follows ``GET /api/v1/events`` for job events the way a careful client
does: on any error (the API killed under it, a refused connection while it restarts, a
stream that goes quiet for longer than a few keep-alives) it connects again with
``Last-Event-ID`` set to the last event it had, so Corral owes it every event in
between, once. It follows every ``corral.job.*`` type, not only the terminal ones, so its
cursor moves with each submit: a reconnect before the first terminal event still has a
position to resume from. It records each job's terminal event, and counts any event it
is sent twice (the stream promises "nothing twice").

``WebhookReceiver`` is a small HTTP server (uvicorn and Starlette, as the API uses)
behind a subscription to the terminal job events made through the API. It answers 200
to everything, records each job's terminal event, and dedups by ``webhook-id``: a
delivery sent again (its first answer never recorded, a lease running out) is allowed
and counted, a delivery never sent is the failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from corral.local.ports import free_port

TERMINAL = ("corral.job.succeeded.v1", "corral.job.failed.v1", "corral.job.cancelled.v1")
RECONNECT_AFTER_S = 0.2
# Several of the API's keep-alives (CORRAL_API_SSE_KEEPALIVE_S, short in a chaos run):
# a stream silent for this long is dead, whatever TCP says.
SILENT_STREAM_S = 5.0


@dataclass
class EventWatcher:
    http: httpx.AsyncClient
    terminal: dict[str, str] = field(default_factory=dict)  # job id -> event type
    duplicates: int = 0
    connects: int = 0
    last_id: str | None = None
    _seen: set[str] = field(default_factory=set)
    _connected: asyncio.Event = field(default_factory=asyncio.Event)
    _moved: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        while True:
            with contextlib.suppress(httpx.HTTPError, ValueError):  # reconnect, from where it was
                await self._follow()
            self._connected.clear()
            await asyncio.sleep(RECONNECT_AFTER_S)

    async def wait_connected(self, timeout_s: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), timeout_s)
        return self._connected.is_set()

    async def wait_cursor(self, timeout_s: float) -> bool:
        """Until the stream has sent an event, so a reconnect has a place to resume."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._moved.wait(), timeout_s)
        return self.last_id is not None

    async def _follow(self) -> None:
        headers = {"Last-Event-ID": self.last_id} if self.last_id else {}
        timeout = httpx.Timeout(5.0, read=SILENT_STREAM_S)
        async with self.http.stream(
            "GET", "/api/v1/events", params={"type": "corral.job.*"}, headers=headers, timeout=timeout
        ) as response:
            if response.status_code != 200:
                return
            self.connects += 1
            event_id: str | None = None
            data: list[str] = []
            async for line in response.aiter_lines():
                if line.startswith(": connected"):
                    self._connected.set()
                elif line.startswith("id:"):
                    event_id = line[3:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                elif not line and data:
                    self._dispatch(json.loads("\n".join(data)))
                    if event_id is not None:
                        self.last_id = event_id
                        self._moved.set()
                    event_id, data = None, []

    def _dispatch(self, event: dict[str, Any]) -> None:
        if event["id"] in self._seen:
            self.duplicates += 1
            return
        self._seen.add(event["id"])
        if event["type"] in TERMINAL:
            self.terminal.setdefault(event["data"]["job_id"], event["type"])


@dataclass
class WebhookReceiver:
    port: int = field(default_factory=free_port)
    terminal: dict[str, str] = field(default_factory=dict)  # job id -> event type
    deliveries: int = 0
    _ids: set[str] = field(default_factory=set)
    _server: uvicorn.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _receive(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.deliveries += 1
        webhook_id = request.headers.get("webhook-id", body.get("id", ""))
        if webhook_id not in self._ids:
            self._ids.add(webhook_id)
            if body.get("type") in TERMINAL:
                self.terminal.setdefault(body["data"]["job_id"], body["type"])
        return Response(status_code=200)

    @property
    def duplicates(self) -> int:
        return self.deliveries - len(self._ids)

    async def serve(self) -> None:
        app = Starlette(routes=[Route("/hook", self._receive, methods=["POST"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        await self._server.serve()

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True

    async def subscribe(self, http: httpx.AsyncClient) -> str:
        """The webhook subscription, made through the API as an integrator would."""
        response = await http.post(
            "/api/v1/webhooks",
            json={"url": self.url, "event_types": list(TERMINAL), "description": "chaos run"},
        )
        response.raise_for_status()
        webhook_id: str = response.json()["id"]
        return webhook_id
