"""The pod's end of an interactive stream: a WebSocket to the API server's ``pods/exec``
or ``pods/portforward`` subresource, spliced to the stream's ``StreamEnd``.

A node that Kubernetes runs has no Corral agent to join a task's sandbox; the kubelet
does it for ``kubectl exec``, so the launcher asks the API server exactly as kubectl does
(a WebSocket upgrade, the kubelet's channel framing) and passes frames straight through:

- **exec**: Corral's channels 0-4 are Kubernetes' (stdin, stdout, stderr, the closing
  ``metav1.Status``, resize), so each frame crosses unchanged, the Status included: the
  exit code the user sees is the one the kubelet reported. ``v5.channel.k8s.io`` is
  offered first: it can say "stdin ended" (``[255, 0]``), which ``v4`` cannot, so a
  command reading its input to the end (``cat``) finishes when the user's input does.
  The process is the container's: its uid, cgroup, namespaces, environment and working
  directory, as the pod runs them.
- **forward**: ``pods/portforward?ports=N`` speaks one data channel (0) and one error
  channel (1), each opened by the kubelet with the port as two little-endian bytes;
  those are taken off, data crosses on channel 0 and an error ends the stream with its
  text on channel 1, as the node agent's forward does. The kubelet connects to the port
  once the WebSocket is open, so nothing listening there is said on channel 1 after the
  open was answered (the agent can say it in its answer). Kubernetes' port-forward has
  no half-close: the end of the user's input is not passed on, and the connection stays
  open until either side closes it; the task closing it sends ``EOF`` and ends the
  stream.

Concurrency: one ``splice`` per stream, three coroutines under it (pod to stream, stream
to pod, an idle watch); the first to finish ends the stream and the other two are
cancelled, so neither side outlives the other. The WebSockets come from a client of
their own (``PodSockets``): long-lived streams never take the connections that the
driver's watch and pod creations need.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any
from urllib.parse import urlencode

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration

from services.launcher.kubernetes.manifests import CONTAINER_NAME
from shared.interactive.protocol import (
    DATA,
    ERROR,
    Channel,
    MalformedFrame,
    exit_status,
    parse_resize,
    resize_payload,
)
from shared.interactive.stream import StreamClosed, StreamEnd

log = logging.getLogger(__name__)

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
EXEC_PROTOCOLS = (V5, V4)
FORWARD_PROTOCOLS = (V4,)  # the kubelet's port-forward speaks v4 alone
CLOSE_CHANNEL = 255  # v5: ``[255, channel]`` says the client closed that channel
# The pods' subresources opened here, each a WebSocket upgrade of a GET, which the API
# server authorises as both get and create: the launcher's Role must grant both.
EXEC, PORTFORWARD = "exec", "portforward"
UPGRADED_SUBRESOURCES = (EXEC, PORTFORWARD)
# An interactive shell when no command is given: bash where the image has it.
SHELL = ("/bin/sh", "-c", "if [ -x /bin/bash ]; then exec /bin/bash; else exec /bin/sh; fi")
# WebSocket pings: an idle terminal is not cut by a proxy or load balancer in front of
# the API server (the stream's own idle timeout decides when idle is too long).
HEARTBEAT_S = 30.0


class PodSocketError(Exception):
    """The API server refused or failed the upgrade; the message says so to the user."""


def exec_query(command: Sequence[str], *, stdin: bool, tty: bool) -> list[tuple[str, str]]:
    """The query of a ``pods/exec`` call, as kubectl sends it: one ``command`` per
    argument, and stderr only without a terminal (a terminal merges it into stdout, and
    the API server refuses both)."""
    return [
        *(("command", argument) for argument in (command or SHELL)),
        ("container", CONTAINER_NAME),
        ("stdin", _flag(stdin)),
        ("stdout", "true"),
        ("stderr", _flag(not tty)),
        ("tty", _flag(tty)),
    ]


def _flag(value: bool) -> str:
    return "true" if value else "false"


class PodSockets:
    """WebSockets to pods' ``exec`` and ``portforward`` subresources in one namespace, with
    the cluster's credentials, over a connection pool of their own.

    The upgrade goes through the kubernetes-asyncio client's own session (its TLS, client
    certificates and refreshed bearer token) rather than its ``WsApiClient``, which can
    offer one subprotocol only and does not say which one the server chose: offering v5
    before v4, and knowing which was taken, is what lets stdin's end through."""

    def __init__(self, configuration: Configuration, namespace: str, max_streams: int = 1000) -> None:
        own = copy.copy(configuration)  # same server, same credentials; its own pool
        own.connection_pool_maxsize = max_streams
        self.client = ApiClient(own)
        self.namespace = namespace

    async def close(self) -> None:
        await self.client.close()

    async def exec(
        self, pod: str, command: Sequence[str], *, stdin: bool, tty: bool
    ) -> aiohttp.ClientWebSocketResponse:
        return await self._connect(pod, EXEC, exec_query(command, stdin=stdin, tty=tty), EXEC_PROTOCOLS)

    async def forward(self, pod: str, port: int) -> aiohttp.ClientWebSocketResponse:
        return await self._connect(pod, PORTFORWARD, [("ports", str(port))], FORWARD_PROTOCOLS)

    async def _connect(
        self, pod: str, subresource: str, query: list[tuple[str, str]], protocols: Sequence[str]
    ) -> aiohttp.ClientWebSocketResponse:
        client: Any = self.client  # kubernetes-asyncio is untyped
        headers: dict[str, str] = {}
        await client.update_params_for_auth(headers, [], ["BearerToken"])
        host = str(client.configuration.host).rstrip("/")
        path = f"/api/v1/namespaces/{self.namespace}/pods/{pod}/{subresource}"
        url = "ws" + host.removeprefix("http") + path + "?" + urlencode(query)
        session: aiohttp.ClientSession = client.rest_client.pool_manager
        try:
            socket = await session.ws_connect(
                url,
                protocols=protocols,
                headers=headers,
                heartbeat=HEARTBEAT_S,
                timeout=aiohttp.ClientWSTimeout(ws_close=5),
            )
        except aiohttp.WSServerHandshakeError as exc:
            raise PodSocketError(
                f"the Kubernetes API server refused {subresource} into pod {pod}: {exc.status} {exc.message}"
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise PodSocketError(
                f"could not reach the Kubernetes API server for {subresource}: {exc}"
            ) from exc
        if socket.protocol is None:
            await socket.close()
            raise PodSocketError(
                f"the Kubernetes API server answered {subresource} with none of {', '.join(protocols)}"
            )
        return socket


async def splice_exec(
    end: StreamEnd,
    pod: aiohttp.ClientWebSocketResponse,
    *,
    tty: bool,
    cols: int,
    rows: int,
    idle_timeout_s: float,
) -> None:
    """Pass an exec's frames both ways until it ends; the stream closes with it."""
    if tty:  # the terminal's size before the first prompt, as kubectl sends it
        await pod.send_bytes(bytes([Channel.RESIZE]) + resize_payload(cols, rows))
    await _splice(end, pod, _exec_output(end, pod), _exec_input(end, pod), idle_timeout_s)


async def splice_forward(
    end: StreamEnd, pod: aiohttp.ClientWebSocketResponse, *, port: int, idle_timeout_s: float
) -> None:
    """Pass a forwarded connection's bytes both ways until either side closes it."""
    await _splice(end, pod, _forward_output(end, pod, port), _forward_input(end, pod), idle_timeout_s)


async def _splice(
    end: StreamEnd,
    pod: aiohttp.ClientWebSocketResponse,
    from_pod: Awaitable[str],
    to_pod: Awaitable[str],
    idle_timeout_s: float,
) -> None:
    """Run both directions and the idle watch; the first to finish says why the stream
    ends (``""``: it ended as it should), and the others are cancelled."""
    runs = [
        asyncio.ensure_future(from_pod),
        asyncio.ensure_future(to_pod),
        asyncio.ensure_future(_idle(end, idle_timeout_s)),
    ]
    reason = "the launcher stopped"
    try:
        done, _ = await asyncio.wait(runs, return_when=asyncio.FIRST_COMPLETED)
        first = next(iter(done))
        if first.cancelled():
            reason = "the launcher stopped"
        elif (error := first.exception()) is not None:
            reason = f"the stream failed: {error}"
            log.warning("an interactive stream failed: %r", error)
        else:
            reason = first.result()
    finally:
        for run in runs:
            run.cancel()
        await asyncio.gather(*runs, return_exceptions=True)
        await end.close(reason)
        await pod.close()


async def _idle(end: StreamEnd, idle_timeout_s: float) -> str:
    while True:  # the deadline moves on with every data frame, either way
        left = end.last_data + idle_timeout_s - time.monotonic()
        if left <= 0:
            return f"no data either way for {idle_timeout_s:g} s"
        await asyncio.sleep(left)


async def _frames(pod: aiohttp.ClientWebSocketResponse) -> AsyncIterator[tuple[int, bytes]]:
    """The pod's binary frames as ``(channel, data)`` until its WebSocket closes."""
    async for message in pod:
        if message.type == aiohttp.WSMsgType.BINARY and message.data:
            yield message.data[0], bytes(message.data[1:])


async def _exec_output(end: StreamEnd, pod: aiohttp.ClientWebSocketResponse) -> str:
    try:
        async for channel, data in _frames(pod):
            if channel in (Channel.STDOUT, Channel.STDERR) and data:
                await end.send(channel, data)
            elif channel == Channel.STATUS:
                await end.send(Channel.STATUS, data)
                return ""
    except StreamClosed:
        return end.close_reason or ""
    said = f"the Kubernetes API server ended the exec without an exit status (close code {pod.close_code})"
    await end.send(Channel.STATUS, exit_status(None, message=said))
    return said


async def _exec_input(end: StreamEnd, pod: aiohttp.ClientWebSocketResponse) -> str:
    while (frame := await end.receive()) is not None:
        channel, data = frame
        if channel == Channel.STDIN and data:
            await pod.send_bytes(bytes([Channel.STDIN]) + data)
        elif channel == Channel.RESIZE:
            try:
                cols, rows = parse_resize(data)
            except MalformedFrame as exc:
                return f"refused: {exc}"
            await pod.send_bytes(bytes([Channel.RESIZE]) + resize_payload(cols, rows))
        elif channel == Channel.EOF and pod.protocol == V5:
            await pod.send_bytes(bytes([CLOSE_CHANNEL, Channel.STDIN]))
        # EOF on v4: Kubernetes cannot say it; the process reads on until it ends.
    return end.close_reason or ""


async def _forward_output(end: StreamEnd, pod: aiohttp.ClientWebSocketResponse, port: int) -> str:
    unopened = {DATA, ERROR}  # each channel's first bytes are the port, little-endian
    try:
        async for channel, data in _frames(pod):
            if channel in unopened:
                unopened.discard(Channel(channel))
                opened = int.from_bytes(data[:2], "little")
                if len(data) < 2 or opened != port:
                    return f"the Kubernetes API server opened port {opened}, not {port}"
                data = data[2:]
            if channel == DATA and data:
                await end.send(DATA, data)
            elif channel == ERROR and data:
                said = data.decode(errors="replace")
                await end.send(ERROR, data)
                return said
        await end.send(Channel.EOF)  # the task closed its side (as the node agent says it)
    except StreamClosed:
        return end.close_reason or ""
    return ""


async def _forward_input(end: StreamEnd, pod: aiohttp.ClientWebSocketResponse) -> str:
    while (frame := await end.receive()) is not None:
        channel, data = frame
        if channel == DATA and data:
            await pod.send_bytes(bytes([DATA]) + data)
    return end.close_reason or ""
