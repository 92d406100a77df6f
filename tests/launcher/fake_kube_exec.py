"""The FAKE API server's ``pods/exec`` and ``pods/portforward`` WebSockets
(``fake_kube_api.FakeKubeApi`` serves them).

Not a kubelet: no process runs and no network namespace exists. What is honest is the
wire, as the API server speaks it to kubectl:

- the upgrade: 404 for an unknown pod, 400 while its container is not running, 400 for
  a tty with stderr (the API server refuses both), 400 for an exec with no command;
  subprotocols ``v5.channel.k8s.io`` and ``v4.channel.k8s.io`` for exec (the client's
  first that the server speaks; ``exec_protocols`` narrows them to play an older
  cluster), ``v4.channel.k8s.io`` alone for port-forward;
- exec's framing: every binary message is a channel byte then data; the server opens
  with an empty stdout message; it ends with one ``metav1.Status`` on channel 3 and a
  close; v5's ``[255, 0]`` closes stdin;
- port-forward's framing: data channel 0 and error channel 1, each opened with the port
  as two little-endian bytes; a refused connection is said on the error channel.

What the "process" does is scripted, the same for every command: it echoes each stdin
message on stdout (a terminal echoing keystrokes; without a tty, ``cat``); a resize
writes ``[size WxH]`` on stdout; a line ``exit N`` ends it with exit code N; stdin's
end (v5) ends it with 0; without a tty it first writes ``started <command>`` on stderr.
A forward connects to ``127.0.0.1:<port>``: the test's listener plays the task's port
(the pod network is this machine's loopback).

Every call is recorded (``exec_calls``, ``forward_calls``) with its exact query (and
an exec's ``Authorization`` header, unchecked).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

if TYPE_CHECKING:
    from tests.launcher.fake_kube_api import FakeKubeApi

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, STATUS, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
_EXIT = re.compile(rb"exit (\d+)[\r\n]")


def _error(code: int, reason: str, message: str) -> web.Response:
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message}
    return web.json_response({**status, "reason": reason, "code": code}, status=code)


@dataclass
class ExecCall:
    pod: str
    query: list[tuple[str, str]]  # in order, repeated keys kept
    protocol: str
    authorization: str = ""  # the request's Authorization header

    def values(self, key: str) -> list[str]:
        return [value for k, value in self.query if k == key]

    @property
    def command(self) -> list[str]:
        return self.values("command")


@dataclass
class ForwardCall:
    pod: str
    query: list[tuple[str, str]]
    protocol: str


@dataclass
class PodStreams:
    kube: FakeKubeApi
    exec_protocols: tuple[str, ...] = (V5, V4)
    exec_calls: list[ExecCall] = field(default_factory=list)
    forward_calls: list[ForwardCall] = field(default_factory=list)
    resizes: list[tuple[int, int]] = field(default_factory=list)  # (Width, Height) received

    def routes(self, app: web.Application, pods: str) -> None:
        app.router.add_get(pods + "/{name}/exec", self._exec)
        app.router.add_get(pods + "/{name}/portforward", self._portforward)

    def _refusal(self, name: str) -> web.Response | None:
        pod = self.kube.pods.get(name)
        if pod is None:
            return _error(404, "NotFound", f'pods "{name}" not found')
        states = pod.get("status", {}).get("containerStatuses") or [{}]
        if "running" not in states[0].get("state", {}):
            return _error(400, "BadRequest", f'container "task" in pod "{name}" is not running')
        return None

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        refusal = self._refusal(name)
        if refusal is not None:
            return refusal
        query = list(request.query.items())
        flags = {key: request.query.get(key, "false").lower() in ("true", "1") for key in ("stdin", "tty")}
        stderr = request.query.get("stderr", "false").lower() in ("true", "1")
        if flags["tty"] and stderr:
            return _error(400, "BadRequest", "tty and stderr cannot both be true")
        if not request.query.getall("command", []):
            return _error(400, "BadRequest", "you must specify at least 1 command")
        socket = web.WebSocketResponse(protocols=self.exec_protocols)
        await socket.prepare(request)
        credential = request.headers.get("Authorization", "")
        self.exec_calls.append(ExecCall(name, query, socket.ws_protocol or "", credential))
        with contextlib.suppress(ConnectionResetError):
            await self._run(socket, request.query.getall("command"), stderr=stderr)
        return socket

    async def _run(self, socket: web.WebSocketResponse, command: list[str], *, stderr: bool) -> None:
        await socket.send_bytes(bytes([STDOUT]))  # the API server's "it is open"
        if stderr:
            await socket.send_bytes(bytes([STDERR]) + f"started {' '.join(command)}\n".encode())
        typed = b""
        async for message in socket:
            if message.type != WSMsgType.BINARY or not message.data:
                continue
            channel, data = message.data[0], message.data[1:]
            if channel == STDIN:
                await socket.send_bytes(bytes([STDOUT]) + data)
                typed += data
                if found := _EXIT.search(typed):
                    await self._end(socket, int(found.group(1)))
                    return
            elif channel == RESIZE:
                size = json.loads(data)
                self.resizes.append((size["Width"], size["Height"]))
                await socket.send_bytes(bytes([STDOUT]) + f"[size {size['Width']}x{size['Height']}]".encode())
            elif channel == CLOSE and socket.ws_protocol == V5 and data == bytes([STDIN]):
                await self._end(socket, 0)
                return

    @staticmethod
    async def _end(socket: web.WebSocketResponse, code: int) -> None:
        status: dict[str, Any] = {"metadata": {}, "status": "Success"}
        if code:
            status = {
                "metadata": {},
                "status": "Failure",
                "message": f"command terminated with non-zero exit code: exit status {code}",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
            }
        await socket.send_bytes(bytes([STATUS]) + json.dumps(status).encode())
        await socket.close()

    async def _portforward(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        refusal = self._refusal(name)
        if refusal is not None:
            return refusal
        ports = request.query.getall("ports", [])
        if len(ports) != 1 or not ports[0].isdigit():
            return _error(400, "BadRequest", f"ports must be one port number, not {ports}")
        socket = web.WebSocketResponse(protocols=(V4,))
        await socket.prepare(request)
        self.forward_calls.append(ForwardCall(name, list(request.query.items()), socket.ws_protocol or ""))
        port = int(ports[0])
        prefix = port.to_bytes(2, "little")
        await socket.send_bytes(bytes([0]) + prefix)
        await socket.send_bytes(bytes([1]) + prefix)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError as exc:
            said = f"error forwarding port {port} to pod {name}: failed to connect to localhost:{port}: {exc}"
            await socket.send_bytes(bytes([1]) + said.encode())
            await socket.close()
            return socket
        with contextlib.suppress(ConnectionResetError):
            await _pump(socket, reader, writer)
        return socket


async def _pump(
    socket: web.WebSocketResponse, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    async def to_port() -> None:
        async for message in socket:
            if message.type == WSMsgType.BINARY and message.data[:1] == b"\x00" and len(message.data) > 1:
                writer.write(message.data[1:])
                await writer.drain()

    async def from_port() -> None:
        while chunk := await reader.read(64 * 1024):
            await socket.send_bytes(b"\x00" + chunk)

    runs = [asyncio.ensure_future(to_port()), asyncio.ensure_future(from_port())]
    try:
        await asyncio.wait(runs, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for run in runs:
            run.cancel()
        await asyncio.gather(*runs, return_exceptions=True)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        await socket.close()
