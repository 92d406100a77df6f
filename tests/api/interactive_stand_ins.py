"""What the API's interactive tests talk to besides the API: a node and a web app.

``ScriptedNode`` STANDS IN FOR A NODE'S AGENT (the real one is
services/launcher/agent/interactive/, exercised by tests/launcher and tests/e2e): it
answers open requests on a real NATS with the real ``StreamEnd``, and scripts what a
session does, so these tests see exactly what the API sends and how it relays what comes
back. An exec echoes its stdin on stdout, says each resize and the end of its stdin, and
ends with the Status of ``exit N``; a forward connects to the requested port on 127.0.0.1 and copies bytes, as
the agent does. ``EchoApp`` is a real HTTP server on a real port that answers every
request with what it received (method, target, headers, body) as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.aio.msg import Msg

from shared.interactive.protocol import (
    INTERACTIVE_QUEUE,
    Channel,
    OpenAnswer,
    OpenRequest,
    exit_status,
    from_node_subject,
    open_subject,
    parse_resize,
    to_node_subject,
)
from shared.interactive.stream import StreamClosed, StreamEnd


@dataclass
class ScriptedNode:
    nc: Client
    node_id: str
    not_running: set[str] = field(default_factory=set)  # attempt ids it refuses
    end_with: str | None = None  # close each exec at once with this reason, as a task ending would
    opened: list[OpenRequest] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)  # each stream's close reason, as the node saw it
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(
            open_subject(self.node_id), queue=INTERACTIVE_QUEUE, cb=self._open
        )

    async def stop(self) -> None:
        await self._sub.unsubscribe()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def wait_ended(self, count: int, timeout_s: float = 5.0) -> list[str]:
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: len(self.ended) >= count)
        return self.ended

    async def _ended(self, reason: str) -> None:
        async with self._changed:
            self.ended.append(reason)
            self._changed.notify_all()

    async def _open(self, msg: Msg) -> None:
        request = OpenRequest.model_validate_json(msg.data)
        self.opened.append(request)
        if request.attempt_id in self.not_running:
            answer = OpenAnswer(ok=False, reason="not_running", error="the attempt is exited, not running")
            await msg.respond(answer.model_dump_json().encode())
            return
        end = StreamEnd(
            self.nc,
            send_subject=from_node_subject(self.node_id, request.stream_id),
            recv_subject=to_node_subject(self.node_id, request.stream_id),
        )
        await end.open()
        await msg.respond(OpenAnswer(ok=True).model_dump_json().encode())
        session = self._exec(end) if request.kind == "exec" else self._forward(end, request.port)
        task = asyncio.create_task(session)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _exec(self, end: StreamEnd) -> None:
        try:
            if self.end_with is not None:
                await end.close(self.end_with)
                return
            while (frame := await end.receive()) is not None:
                channel, data = frame
                if channel == Channel.RESIZE:
                    cols, rows = parse_resize(data)
                    await end.send(Channel.STDOUT, f"resized {cols}x{rows}".encode())
                elif channel == Channel.EOF:
                    await end.send(Channel.STDOUT, b"<end of stdin>")
                elif data.startswith(b"exit "):
                    await end.send(Channel.STATUS, exit_status(int(data[5:])))
                    await end.close("")
                    return
                elif channel == Channel.STDIN:
                    await end.send(Channel.STDOUT, data)
        except StreamClosed:
            pass
        finally:
            await end.close("")
            await self._ended(end.close_reason or "")

    async def _forward(self, end: StreamEnd, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def to_port() -> None:
            while (frame := await end.receive()) is not None:
                if frame[0] == Channel.EOF:
                    writer.write_eof()
                else:
                    writer.write(frame[1])
                    await writer.drain()

        pump = asyncio.create_task(to_port())
        try:
            while data := await reader.read(65536):
                await end.send(Channel.STDIN, data)
            await end.send(Channel.EOF)  # the app closed its side, as a TCP half-close
        except StreamClosed:
            pass
        finally:
            await end.close("")
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await pump
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            await self._ended(end.close_reason or "")


class EchoApp:
    """A web app on 127.0.0.1: answers each request with what it got, and sets two cookies
    (one named as Corral's own, which must not reach the browser)."""

    def __init__(self) -> None:
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        request_line, *header_lines = head.decode().split("\r\n")[:-2]
        headers = [line.split(": ", 1) for line in header_lines]
        length = next((int(v) for k, v in headers if k.lower() == "content-length"), 0)
        body = await reader.readexactly(length) if length else b""
        method, target, _ = request_line.split(" ")
        answer = json.dumps(
            {"method": method, "target": target, "headers": headers, "body": body.decode()}
        ).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"set-cookie: app_state=1; Path=/\r\nset-cookie: corral_session=forged; Path=/\r\n"
            b"connection: close\r\ncontent-length: " + str(len(answer)).encode() + b"\r\n\r\n" + answer
        )
        await writer.drain()
        writer.close()
