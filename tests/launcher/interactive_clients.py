"""A node agent serving interactive streams, and the API's end of them, for tests.

``running_node`` runs a real ``NodeAgent`` (sandboxed or not) on real Postgres, with its
``InteractiveServer`` answering on real NATS, as ``agent/app.py`` wires them. ``Client``
opens streams to it the way the API does: its own ``StreamEnd`` first, then the open
request.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nats.aio.client import Client as Nats

from services.launcher.agent.agent import NodeAgent
from services.launcher.agent.interactive.server import InteractiveServer
from services.launcher.agent.sandbox.sandbox import Sandbox
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.interactive.protocol import (
    INTERACTIVE_QUEUE,
    Channel,
    OpenAnswer,
    OpenRequest,
    from_node_subject,
    open_subject,
    to_node_subject,
)
from shared.interactive.stream import StreamEnd
from tests.launcher import attempts
from tests.launcher.sandboxes import sandbox_for_tests

NODE = "gpu-3"
# The client ends opened in the current test, closed with its node (a failed test's too).
_CLIENT_STREAMS: list[StreamEnd] = []


@dataclass
class Node:
    agent: NodeAgent
    server: InteractiveServer
    nc: Nats
    db: Database
    root: Path
    sandbox: Sandbox | None

    def log_of(self, job_id: str, index: int = 0) -> Path:
        return self.root / "logs" / job_id / f"worker-{index}" / "attempt-1.log"

    async def run_task(self, command: str, *, ports: dict[str, list[int]] | None = None) -> tuple[str, str]:
        """A one-task job on this node, started and printing ``ready``: (attempt, job)."""
        (attempt_id,) = await attempts.assigned(self.db, NODE, instances=1, command=f"echo ready; {command}")
        job_id = await self.db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", attempt_id)
        if ports is not None:
            await self.db.execute("UPDATE launcher.attempts SET ports = $2 WHERE id = $1", attempt_id, ports)
        await self.agent.start_attempt(attempt_id)
        await wait_for(lambda: "ready" in _text(self.log_of(job_id)), f"{command!r} to start")
        return attempt_id, job_id


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


async def wait_for(condition: Any, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running_node(
    db: Database, bus: NatsBus, root: Path, *, sandboxed: bool = True
) -> AsyncIterator[Node]:
    await attempts.known_nodes(db, NODE)
    sandbox = sandbox_for_tests(root) if sandboxed else None
    try:
        async with asyncio.TaskGroup() as tg:
            agent = NodeAgent(
                db,
                tg,
                node_id=NODE,
                log_dir=root / "logs",
                state_dir=root / "state",
                work_dir=root / "work",
                stop_grace_s=1.0,
                sandbox=sandbox,
                on_task_end=lambda attempt_id: server.task_ended(attempt_id),
            )
            server = InteractiveServer(bus.nc, NODE, agent, tg)
            answering = tg.create_task(bus.answer(open_subject(NODE), INTERACTIVE_QUEUE, server.answer))
            await agent.register(lease_s=30)
            try:
                yield Node(agent, server, bus.nc, db, root, sandbox)
            finally:
                for stream in list(_CLIENT_STREAMS):
                    await stream.close("the test is over")
                _CLIENT_STREAMS.clear()
                agent.fence_all("the test is over")
                answering.cancel()
    finally:
        if sandbox is not None:
            sandbox.close()


@dataclass
class Session:
    """The API's end of one stream."""

    answer: OpenAnswer
    stream: StreamEnd
    output: dict[int, bytearray] = field(default_factory=dict)
    status: bytes | None = None

    async def send(self, channel: int, data: bytes = b"") -> None:
        await self.stream.send(channel, data)

    async def read_until(
        self, needle: bytes, channel: int = Channel.STDOUT, timeout_s: float = 20.0
    ) -> bytes:
        """Frames until ``needle`` appeared on ``channel``; what that channel said."""
        async with asyncio.timeout(timeout_s):
            while needle not in self.output.get(channel, b""):
                if not await self._take():
                    break
        return bytes(self.output.get(channel, b""))

    async def until_closed(self, timeout_s: float = 20.0) -> str | None:
        """Every frame until the node closes the stream; its reason."""
        async with asyncio.timeout(timeout_s):
            while await self._take():
                pass
        return self.stream.close_reason

    def said(self, channel: int = Channel.STDOUT) -> str:
        return bytes(self.output.get(channel, b"")).decode(errors="replace")

    async def _take(self) -> bool:
        frame = await self.stream.receive()
        if frame is None:
            return False
        channel, data = frame
        if channel == Channel.STATUS:
            self.status = data
        self.output.setdefault(channel, bytearray()).extend(data)
        return True


async def open_session(nc: Nats, **fields: Any) -> Session:
    stream_id = secrets.token_hex(16)
    request = OpenRequest(stream_id=stream_id, user="alice", **fields)
    stream = StreamEnd(
        nc, send_subject=to_node_subject(NODE, stream_id), recv_subject=from_node_subject(NODE, stream_id)
    )
    await stream.open()
    _CLIENT_STREAMS.append(stream)
    reply = await nc.request(open_subject(NODE), request.model_dump_json().encode(), timeout=10)
    answer = OpenAnswer.model_validate_json(reply.data)
    if not answer.ok:
        await stream.close("refused")
    return Session(answer, stream)
