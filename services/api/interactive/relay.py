"""A session's WebSocket and its stream to the node, copied both ways.

The client speaks Kubernetes' ``v4.channel.k8s.io``: every binary message is one channel
byte, then data. Channels 0-4 are the stream's own channels (``shared/interactive``), so
a message passes through as it is, one frame per message:

- exec: the client sends stdin (0) and resizes (4); it gets stdout (1), stderr (2), and
  one Status (3) when the command ends, then the WebSocket closes with 1000.
- port-forward: data (0) both ways; error text (1) from the node; the client closing the
  WebSocket is the end of its input, and the task's end of the connection (the node's
  EOF) closes the WebSocket with 1000 once its data is through: a v4 WebSocket cannot
  be half-closed, and a client reads that close as the connection's end.
- either: the message ``255, 0`` (``v5.channel.k8s.io``'s close of stdin) says the
  client's input ended while it still reads: the node closes the process's stdin, or
  half-closes the connection.

Whatever the client sends is checked before it goes on: a text message, an empty one, a
channel the session does not take or a resize that is not ``{"Width", "Height"}`` closes
that WebSocket with 1008 and the reason, and ends its stream; nothing else is affected.

Two tasks copy, one each way, under one TaskGroup: the first to finish (the client gone,
the node closing the stream: the command ended, the task ended, an idle timeout) ends the
other. Whatever ends it, the stream is closed (the node then stops the process or the
connection) and the WebSocket too, and the outcome is returned for the audit row.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from shared.interactive.protocol import Channel, MalformedFrame, exit_code_of, parse_resize
from shared.interactive.stream import StreamClosed, StreamEnd

# WebSocket close codes (RFC 6455).
NORMAL = 1000
POLICY_VIOLATION = 1008
SERVER_ERROR = 1011
SERVICE_RESTART = 1012
_CLIENT_CHANNELS = {
    "exec": frozenset({Channel.STDIN, Channel.RESIZE}),
    "port-forward": frozenset({Channel.STDIN}),
}
_TO_CLIENT = frozenset({Channel.STDIN, Channel.STDOUT, Channel.STDERR, Channel.STATUS})
STDIN_CLOSED = bytes([255, Channel.STDIN])  # v5.channel.k8s.io: close channel, then the one closed
_NAMED = {"exec": "an exec", "port-forward": "a port-forward"}


@dataclass
class Outcome:
    """How a session ended, for its audit row."""

    reason: str = ""
    exit_code: int | None = None
    bytes_in: int = 0
    bytes_out: int = 0
    finished: str = ""  # how the task's side finished on its own: the Status, or the end of a forward's data


class ClientBroke(Exception):
    """The client sent something the session does not take; the reason goes back to it."""


def close_reason(text: str) -> str:
    """``text`` cut to what a WebSocket close frame can carry (123 bytes of UTF-8)."""
    return text.encode()[:123].decode(errors="ignore")


def failure_status(message: str) -> bytes:
    """A Kubernetes Status for an exec that ended without the command's own end (the task
    ended, the node went away): kubectl prints the message."""
    return json.dumps(
        {"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError"}
    ).encode()


def _checked(kind: str, message: Mapping[str, Any]) -> tuple[int, bytes]:
    """The channel and data of a client's message; ``ClientBroke`` for one not taken."""
    raw = message.get("bytes")
    if not isinstance(raw, bytes):
        raise ClientBroke("text messages are not taken: send binary ones, a channel byte then data")
    if not raw:
        raise ClientBroke("an empty message: each must start with its channel byte")
    channel, data = raw[0], raw[1:]
    if channel not in _CLIENT_CHANNELS[kind]:
        taken = ", ".join(str(int(c)) for c in sorted(_CLIENT_CHANNELS[kind]))
        raise ClientBroke(f"channel {channel} is not taken by {_NAMED[kind]} session (it takes {taken})")
    if channel == Channel.RESIZE:
        try:
            parse_resize(data)
        except MalformedFrame as exc:
            raise ClientBroke(str(exc)) from None
    return channel, data


async def relay(ws: WebSocket, stream: StreamEnd, kind: str, outcome: Outcome | None = None) -> Outcome:
    """Copy until either side ends; close both; say how it ended (in ``outcome``, if
    given: what it counted stays there when the relay is cancelled)."""
    outcome = outcome if outcome is not None else Outcome()
    client_done: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def from_client() -> None:
        try:
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    code = message.get("code", NORMAL)
                    left = "the API shut down" if code == SERVICE_RESTART else "the client left"
                    if kind == "port-forward":
                        with contextlib.suppress(StreamClosed):
                            await stream.send(Channel.EOF)
                    if not client_done.done():
                        client_done.set_result(left)
                    return
                if message.get("bytes") == STDIN_CLOSED:
                    await stream.send(Channel.EOF)
                    continue
                channel, data = _checked(kind, message)
                if channel == Channel.STDIN:
                    outcome.bytes_in += len(data)
                await stream.send(channel, data)
        except ClientBroke as exc:
            reason = f"a malformed message from the client: {exc}"
            with contextlib.suppress(Exception):
                await ws.close(POLICY_VIOLATION, close_reason(str(exc)))
            if not client_done.done():
                client_done.set_result(reason)
        except StreamClosed:
            return  # the node's side ended: to_client says how
        except (WebSocketDisconnect, RuntimeError):  # closed under it (by the other task)
            if not client_done.done():
                client_done.set_result("the client left")

    async def to_client() -> None:
        while (frame := await stream.receive()) is not None:
            channel, data = frame
            if channel == Channel.EOF:
                if kind == "port-forward":
                    outcome.finished = "the task closed the connection"
                    return
                continue
            if channel not in _TO_CLIENT:
                continue
            if channel == Channel.STATUS:
                outcome.exit_code = exit_code_of(data)
                outcome.finished = "the command exited"
            else:
                outcome.bytes_out += len(data)
            try:
                await ws.send_bytes(bytes([channel]) + data)
            except Exception:  # the client went away mid-send (it is said several ways)
                if not client_done.done():
                    client_done.set_result("the client left")
                return
            if channel == Channel.STATUS:
                return

    async with asyncio.TaskGroup() as tg:
        reader = tg.create_task(from_client(), name="interactive from client")
        writer = tg.create_task(to_client(), name="interactive to client")
        # The reader's end matters only through client_done: when the node's side ends,
        # the writer still drains what came before the close (the last output, the Status).
        await asyncio.wait((writer, client_done), return_when=asyncio.FIRST_COMPLETED)
        if client_done.done():
            outcome.reason = client_done.result()
            await stream.close(outcome.reason)
            writer.cancel()
        else:
            await _end_from_node(ws, stream, kind, outcome)
        reader.cancel()
    if not client_done.done():
        client_done.cancel()
    return outcome


async def _end_from_node(ws: WebSocket, stream: StreamEnd, kind: str, outcome: Outcome) -> None:
    """The node ended the stream, or the command's Status came: tell the client and close."""
    if outcome.finished:
        await stream.close("")
        outcome.reason = outcome.finished
    else:
        outcome.reason = stream.close_reason or "the node closed the stream"
        with contextlib.suppress(Exception):
            if kind == "exec":
                await ws.send_bytes(bytes([Channel.STATUS]) + failure_status(outcome.reason))
            elif stream.close_reason:
                await ws.send_bytes(bytes([Channel.STDOUT]) + outcome.reason.encode())
    if ws.application_state != WebSocketState.DISCONNECTED:
        with contextlib.suppress(Exception, WebSocketDisconnect):
            await ws.close(NORMAL)
