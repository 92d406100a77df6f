"""A WebSocket to a task's app through the proxy (a Jupyter kernel's channels, a live
dashboard): the client's WebSocket on one side, the app's over a forward stream on the
other, messages copied between them.

The API is the app's WebSocket client: it speaks the protocol to the app with the
``websockets`` library's sans-I/O ``ClientProtocol`` over the stream's bytes (the
handshake, framing, masking, the app's pings answered), and passes whole messages on, so
the two connections are independent (each side's own pings, fragmentation and close
handshake) and the app never sees Corral's credentials: the handshake it gets carries
the client's headers as ``proxy.request_headers`` passes them on. The client's WebSocket
is accepted only once the app has accepted, with the subprotocol the app chose, so a
refusal by the app is the client's refusal too.
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from services.api.interactive.proxy import Headers, NotHttp
from shared.interactive.protocol import DATA, ERROR, Channel
from shared.interactive.stream import StreamClosed, StreamEnd

# Headers the protocol object writes itself, or that are the client's own handshake's.
_OWN = frozenset(
    {
        "host",
        "upgrade",
        "connection",
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
    }
)
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class AppWebSocket:
    """The app's side: a WebSocket client over ``stream``."""

    def __init__(self, stream: StreamEnd, port: int, target: str, headers: Headers, what: str) -> None:
        protocols = [
            Subprotocol(p.strip())
            for n, v in headers
            if n == b"sec-websocket-protocol"
            for p in v.decode().split(",")
        ]
        self._stream = stream
        self._what = what
        self._protocol = ClientProtocol(
            parse_uri(f"ws://127.0.0.1:{port}{target}"),
            subprotocols=protocols or None,
            max_size=MAX_MESSAGE_BYTES,
        )
        self._request = self._protocol.connect()
        for name, value in headers:
            if name.decode() not in _OWN and name != b"sec-websocket-protocol":
                self._request.headers[name.decode()] = value.decode("latin-1")
        self._fragments: list[bytes] = []
        self._text = False
        self._eof = False
        self.bytes_in = 0
        self.bytes_out = 0

    async def handshake(self) -> Response:
        """Send the upgrade and read the app's answer (``NotHttp`` if it refused)."""
        self._protocol.send_request(self._request)
        await self._flush()
        while self._protocol.handshake_exc is None and not self._eof:
            for event in await self._events():
                if isinstance(event, Response) and self._protocol.handshake_exc is None:
                    return event
        raise NotHttp(f"{self._what} refused the WebSocket: {self._protocol.handshake_exc}")

    async def to_app(self, client: WebSocket) -> None:
        """Copy the client's messages to the app until the client leaves."""
        try:
            while True:
                message = await client.receive()
                if message["type"] == "websocket.disconnect":
                    self._protocol.send_close(message.get("code", 1000))
                    await self._flush()
                    return
                if (text := message.get("text")) is not None:
                    self.bytes_in += len(text.encode())
                    self._protocol.send_text(text.encode())
                else:
                    data = message.get("bytes") or b""
                    self.bytes_in += len(data)
                    self._protocol.send_binary(data)
                await self._flush()
        except (StreamClosed, WebSocketDisconnect, RuntimeError):
            return

    async def to_client(self, client: WebSocket) -> int:
        """Copy the app's messages to the client; the close code the app ended with
        (1006 when its connection ended without one, 1011 when it broke)."""
        try:
            return await self._to_client(client)
        except NotHttp:
            return 1011
        except (WebSocketDisconnect, RuntimeError):  # the client went away mid-send
            return 1000

    async def _to_client(self, client: WebSocket) -> int:
        while True:
            for event in await self._events():
                if not isinstance(event, Frame):
                    continue
                if event.opcode is Opcode.CLOSE:
                    code = int.from_bytes(event.data[:2], "big") if len(event.data) >= 2 else 1000
                    return code
                if event.opcode in (Opcode.TEXT, Opcode.BINARY):
                    self._text = event.opcode is Opcode.TEXT
                    self._fragments = [bytes(event.data)]
                elif event.opcode is Opcode.CONT:
                    self._fragments.append(bytes(event.data))
                else:
                    continue  # pings are answered by the protocol; pongs need nothing
                if event.fin:
                    whole = b"".join(self._fragments)
                    self.bytes_out += len(whole)
                    if self._text:
                        await client.send_text(whole.decode())
                    else:
                        await client.send_bytes(whole)
            if self._eof or self._protocol.state.name == "CLOSED":
                return 1006

    async def _events(self) -> list[object]:
        if self._eof:
            return []
        frame = await self._stream.receive()
        if frame is None or frame[0] == Channel.EOF:
            self._eof = True
            self._protocol.receive_eof()
        elif frame[0] == ERROR:
            raise NotHttp(f"{self._what}: {frame[1].decode(errors='replace')}")
        elif frame[0] == DATA:
            self._protocol.receive_data(frame[1])
        events: list[object] = list(self._protocol.events_received())
        await self._flush()  # pongs, and the close handshake's answer
        return events

    async def _flush(self) -> None:
        for data in self._protocol.data_to_send():
            if data:
                with contextlib.suppress(StreamClosed):
                    await self._stream.send(DATA, data)
            else:
                with contextlib.suppress(StreamClosed):
                    await self._stream.send(Channel.EOF)


async def relay_messages(client: WebSocket, app: AppWebSocket) -> int:
    """Copy both ways until either side ends; the app's close code, or 1000 when the
    client left first."""
    async with asyncio.TaskGroup() as tg:
        upstream = tg.create_task(app.to_app(client))
        downstream = tg.create_task(app.to_client(client))
        done, _ = await asyncio.wait((upstream, downstream), return_when=asyncio.FIRST_COMPLETED)
        for task in (upstream, downstream):
            if task not in done:
                task.cancel()
    return downstream.result() if downstream.done() and not downstream.cancelled() else 1000
