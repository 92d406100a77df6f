"""Interactive access to a running task: exec and port-forward through the API.

    from corral.sdk.interactive import Interactive

    async with Interactive() as corral:                   # URL and token: see config.py
        done = await corral.run("job-01m8...", ["nvidia-smi", "-L"], task="worker-1")
        print(done.exit_code, done.stdout.decode())

        stream = await corral.exec("job-01m8...", ["python3"], tty=True)
        await stream.write_stdin(b"print(6 * 7)\\n")
        while (frame := await stream.receive()) is not None:
            channel, data = frame                         # channels.Channel.STDOUT, b"42\\r\\n"...

A session is made in two steps, as the API asks. ``POST /api/v1/jobs/{job}/sessions``
names the task and what to run there; the API decides who may (the job's owner or an
admin, with a token that carries the ``exec`` scope), checks that the task runs, and
answers where the session's WebSocket is. Then the WebSocket (``stream_url``: opened once,
within seconds, with the same token) carries the bytes, framed as Kubernetes frames them
(``channels.py``). The node is reached through the API and the bus, never directly: no
node opens a port for this.

A refusal of either step is an ``ApiError`` like any other call's (the API's
problem+json, also for a refused WebSocket handshake); no answer at all is
``ConnectionFailed``. The session ends when the command ends (a final status frame, then
the server closes), when either side closes, or when the task ends; ``close_reason`` then
says why when it was not the command ending.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from corral.sdk._base import DEFAULT_TIMEOUT_S, USER_AGENT, Settings
from corral.sdk.channels import (
    DATA,
    STDIN_ENDED,
    SUBPROTOCOLS,
    Channel,
    exit_code_of,
    frame,
    resize_payload,
)
from corral.sdk.errors import ApiError, ConnectionFailed
from corral.sdk.models import InteractiveSession

# A frame carries at most this much data: the server relays each message as one bus
# message, so a bulk copy is cut where the server would cut it anyway.
MAX_FRAME_DATA = 64 * 1024
# What a server message may be: a frame of MAX_FRAME_DATA and its channel byte, with room.
MAX_MESSAGE = 1024 * 1024


def websocket_url(api_url: str, path: str) -> str:
    """The WebSocket URL of ``path`` on the API: ``http`` becomes ``ws``, ``https`` ``wss``
    (a path prefix of the API's URL, as behind a reverse proxy, is kept)."""
    parts = urlsplit(api_url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme)
    if scheme is None:
        raise ValueError(f"the API URL {api_url!r} is not http:// or https://")
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + path, "", ""))


@dataclass
class ExecResult:
    """What a command run to its end said: its exit code (``None`` when the session ended
    without one: ``reason`` says why), and everything it wrote."""

    exit_code: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    reason: str = ""


@dataclass
class SessionStream:
    """One open session's WebSocket. ``receive`` gives the server's frames in order;
    the ``write_*``/``resize`` methods send the client's. Not shared between tasks that
    receive (one reader), though any task may send."""

    session: InteractiveSession
    websocket: ClientConnection
    status: bytes | None = None
    close_reason: str | None = None

    @property
    def exit_code(self) -> int | None:
        """The command's exit code once its status frame came (0 for success)."""
        return None if self.status is None else exit_code_of(self.status)

    async def send(self, channel: int, data: bytes = b"") -> None:
        """Send ``data`` on ``channel``, cut to frames the server relays whole. A closed
        session drops it: ``receive`` says why the session ended."""
        chunks = [data[i : i + MAX_FRAME_DATA] for i in range(0, len(data), MAX_FRAME_DATA)] or [b""]
        try:
            for chunk in chunks:
                await self.websocket.send(frame(channel, chunk))
        except ConnectionClosed:
            return

    async def write_stdin(self, data: bytes) -> None:
        if data:
            await self.send(Channel.STDIN, data)

    async def write(self, data: bytes) -> None:
        """A port-forward's bytes towards the task's port."""
        if data:
            await self.send(DATA, data)

    async def close_stdin(self) -> None:
        """Say that this side's input ended: an exec's command reads end-of-file on its
        standard input; a port-forward's connection is half-closed towards the task."""
        try:
            await self.websocket.send(STDIN_ENDED)
        except ConnectionClosed:
            return

    async def resize(self, cols: int, rows: int) -> None:
        await self.send(Channel.RESIZE, resize_payload(cols, rows))

    async def receive(self) -> tuple[int, bytes] | None:
        """The next ``(channel, data)`` from the server, or ``None`` once the session has
        ended. A status frame is kept as ``status`` (and returned too)."""
        while True:
            try:
                message = await self.websocket.recv()
            except ConnectionClosed as closed:
                self._note_close(closed)
                return None
            if isinstance(message, str) or not message:
                continue  # not a frame: the server sends none, and a stray one is no data
            channel, data = message[0], message[1:]
            if channel == Channel.STATUS:
                self.status = data
            return channel, data

    async def close(self) -> None:
        """Leave the session (for an exec, the server ends the command)."""
        await self.websocket.close()
        if self.close_reason is None:
            self.close_reason = ""

    def _note_close(self, closed: ConnectionClosed) -> None:
        received = closed.rcvd
        if received is None:
            self.close_reason = "the connection to the API was lost"
        elif received.code == 1000:
            self.close_reason = received.reason
        else:
            self.close_reason = received.reason or f"closed by the API (WebSocket code {received.code})"


class Interactive:
    """Sessions into running tasks. Holds one HTTP connection pool; close it when done
    (``async with``). Belongs to one event loop."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        # Never retried: a session POST that reached the server made a session.
        self._settings = Settings.build(url, token, timeout_s, 0)
        self.url = self._settings.url
        self._timeout_s = timeout_s
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=self._settings.headers,
            timeout=self._settings.timeout,
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Interactive:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()

    async def create_session(
        self,
        job_id: str,
        kind: Literal["exec", "port-forward"],
        *,
        task: str | None = None,
        command: Sequence[str] = (),
        tty: bool = False,
        stdin: bool = True,
        cols: int = 80,
        rows: int = 24,
        port: str | None = None,
    ) -> InteractiveSession:
        """Ask for a session (the first step); ``connect`` opens it."""
        body: dict[str, Any] = {"kind": kind}
        if task is not None:
            body["task"] = task
        if kind == "exec":
            body.update(command=list(command), tty=tty, stdin=stdin, cols=cols, rows=rows)
        else:
            body["port"] = port
        path = f"/api/v1/jobs/{quote(job_id, safe='')}/sessions"
        try:
            response = await self._http.post(path, json=body)
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.url, exc) from exc
        if response.status_code >= 400:
            raise ApiError.from_response(response)
        return InteractiveSession.model_validate_json(response.content)

    async def connect(self, session: InteractiveSession) -> SessionStream:
        """Open a session's WebSocket (the second step)."""
        url = websocket_url(self.url, session.stream_url)
        try:
            websocket = await connect(
                url,
                subprotocols=[Subprotocol(p) for p in SUBPROTOCOLS],
                additional_headers={"Authorization": self._settings.headers["Authorization"]},
                user_agent_header=USER_AGENT,
                open_timeout=self._timeout_s,
                max_size=MAX_MESSAGE,
                # Interactive bytes are small and often already compressed (a bulk copy);
                # deflate would only add latency to each keystroke.
                compression=None,
            )
        except InvalidStatus as refused:
            answer = refused.response
            headers = list(answer.headers.raw_items())
            response = httpx.Response(answer.status_code, headers=headers, content=bytes(answer.body or b""))
            raise ApiError.from_response(response) from refused
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            raise ConnectionFailed(self.url, exc) from exc
        return SessionStream(session, websocket)

    async def exec(
        self,
        job_id: str,
        command: Sequence[str] = (),
        *,
        task: str | None = None,
        tty: bool = False,
        stdin: bool = True,
        cols: int = 80,
        rows: int = 24,
    ) -> SessionStream:
        """Run ``command`` in a running task (``[]``: a shell), joined to it as one of its
        own processes: its user, its environment, its working directory, its limits."""
        session = await self.create_session(
            job_id, "exec", task=task, command=command, tty=tty, stdin=stdin, cols=cols, rows=rows
        )
        return await self.connect(session)

    async def port_forward(self, job_id: str, port: str, *, task: str | None = None) -> SessionStream:
        """One connection to the task's port labelled ``port`` (e.g. ``http``)."""
        session = await self.create_session(job_id, "port-forward", task=task, port=port)
        return await self.connect(session)

    async def run(
        self, job_id: str, command: Sequence[str], *, task: str | None = None, stdin: bytes | None = None
    ) -> ExecResult:
        """Run ``command`` to its end without a terminal and gather what it wrote;
        ``stdin``, when given, is its whole standard input."""
        stream = await self.exec(job_id, command, task=task, stdin=stdin is not None)
        out: list[bytes] = []
        err: list[bytes] = []
        try:
            if stdin is not None:
                await stream.write_stdin(stdin)
                await stream.close_stdin()
            while (received := await stream.receive()) is not None:
                channel, data = received
                if channel == Channel.STDOUT:
                    out.append(data)
                elif channel == Channel.STDERR:
                    err.append(data)
        finally:
            await stream.close()
        reason = "" if stream.status is not None else stream.close_reason or "the session ended"
        return ExecResult(stream.exit_code, b"".join(out), b"".join(err), reason)

    async def probe(self, path: str) -> int:
        """The HTTP status a ``GET`` of ``path`` on the API answers with (for a proxied
        app: whether it listens yet); a connection failure is ``ConnectionFailed``."""
        try:
            response = await self._http.get(path)
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.url, exc) from exc
        return response.status_code
