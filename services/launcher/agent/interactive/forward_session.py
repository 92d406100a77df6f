"""One port-forward: a TCP connection to a task's port on this machine, copied to and
from a stream.

Tasks share the node's network (a sandbox has no network namespace), so the task's
port is reached at ``127.0.0.1:<port>``; the server checked that the port is one the
task was allocated and that the socket listening on it is the task's own (not another
tenant's that bound the port: ``listeners``), and connected before it answered
(nothing listening, or someone else listening, is said to the client as ``refused``,
before any byte flows).

Data is ``DATA`` (channel 0) both ways. Each direction ends on its own, as a TCP
half-close: the task's end of file is sent as ``EOF``, and the client's ``EOF`` shuts
down the connection's write side; once both have ended the stream is closed normally.
A connection error is said on the error channel (``ERROR``, as Kubernetes'
port-forward does) and closes the stream with it. The client closing, the peer going
silent, the idle timeout, the task ending, or a frame on another channel end it too.
"""

from __future__ import annotations

import asyncio
import contextlib

from services.launcher.agent.interactive.lifetime import watch_stream
from shared.interactive.protocol import DATA, ERROR, MAX_DATA, Channel
from shared.interactive.stream import StreamClosed, StreamEnd


class ForwardSession:
    kind = "forward"

    def __init__(
        self,
        stream: StreamEnd,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        port: int,
        idle_timeout_s: float,
    ) -> None:
        self._stream = stream
        self._reader = reader
        self._writer = writer
        self._port = port
        self._idle_timeout_s = idle_timeout_s
        self._ended = asyncio.Event()
        self._reason: str | None = None
        self.exit_code: int | None = None  # (an exec's; a forward has none)

    def end(self, reason: str) -> None:
        if self._reason is None:
            self._reason = reason
        self._ended.set()

    async def run(self) -> str:
        """Run until the session ends; why it ended, for the log."""
        directions = [
            asyncio.create_task(self._task_to_client()),
            asyncio.create_task(self._client_to_task()),
        ]
        both = asyncio.create_task(self._both_done(directions))
        watch = asyncio.create_task(watch_stream(self._stream, self._idle_timeout_s, self.end))
        try:
            await self._ended.wait()
        finally:
            pending = [*directions, both, watch]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
            # (cancelled: the agent is stopping, and says so)
            await self._stream.close(self._reason if self._reason is not None else "the node's agent stopped")
        return self._reason or "both sides finished"

    async def _both_done(self, directions: list[asyncio.Task[None]]) -> None:
        await asyncio.gather(*directions)
        self.end("")

    async def _task_to_client(self) -> None:
        try:
            while data := await self._reader.read(MAX_DATA):
                await self._stream.send(DATA, data)
            await self._stream.send(Channel.EOF)
        except StreamClosed:
            self.end(self._stream.close_reason or "the client closed the stream")
        except OSError as exc:
            await self._failed(f"the connection to port {self._port} failed: {exc.strerror or exc}")

    async def _client_to_task(self) -> None:
        try:
            while (frame := await self._stream.receive()) is not None:
                channel, data = frame
                if channel == DATA:
                    self._writer.write(data)
                    await self._writer.drain()
                elif channel == Channel.EOF:
                    if self._writer.can_write_eof():
                        self._writer.write_eof()
                    return
                else:
                    self.end(f"a malformed frame: channel {channel} carries nothing to a port")
                    return
        except OSError as exc:
            await self._failed(f"the connection to port {self._port} failed: {exc.strerror or exc}")
            return
        self.end(self._stream.close_reason or "the client closed the stream")

    async def _failed(self, said: str) -> None:
        with contextlib.suppress(StreamClosed):
            await self._stream.send(ERROR, said.encode())
        self.end(said)
