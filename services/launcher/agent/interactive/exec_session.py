"""One exec: a command inside a task, its terminal (or pipes) copied to and from a stream.

Three copies run at once: the command's output to the stream (``STDOUT``; ``STDERR``
too without a terminal), the stream's frames to the command (``STDIN``, ``RESIZE``,
``EOF``), and a watch for the ends that come from neither (the stream closed while a
write to the command waits, no data either way for ``idle_timeout_s``). Output is read
only once the stream has credit for it: a client that reads slowly leaves the output in
the pty, and the command blocks on its writes, as it would on a slow terminal.

The session ends when the command exits, the client closes, the stream's peer goes
silent, the idle timeout passes, the task ends (``end``, from the agent), or the client
sends a frame an exec has no use for (the session alone is closed, with the reason).
Ending, the command gets SIGHUP (as from a terminal hanging up), then everything still
in its session is killed (``commands.kill_session``); the client gets the command's
end as a Kubernetes Status on ``STATUS``, then the stream is closed with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib

from services.launcher.agent.interactive import commands, fds
from services.launcher.agent.interactive.commands import ExecProcess
from services.launcher.agent.interactive.lifetime import watch_stream
from shared.interactive.protocol import MAX_DATA, Channel, MalformedFrame, exit_status, parse_resize
from shared.interactive.stream import StreamClosed, StreamEnd

HANG_UP_GRACE_S = 1.0  # for the command to go on SIGHUP before its session is killed
DRAIN_S = 2.0  # for the output already written to reach the stream once the command is gone
# A command signalled by the task's end (the task's stop reaches every process of its
# pid namespace) is usually seen exiting a moment before the agent's watcher says the
# task ended: that is waited for, so the client is told why.
TASK_END_GRACE_S = 0.5
SIGNALLED = 128  # the helper's status for a command a signal ended: 128 + the signal


class ExecSession:
    kind = "exec"

    def __init__(self, stream: StreamEnd, process: ExecProcess, *, idle_timeout_s: float) -> None:
        self._stream = stream
        self._process = process
        self._idle_timeout_s = idle_timeout_s
        self._ended = asyncio.Event()
        self._reason: str | None = None
        self.exit_code: int | None = None

    def end(self, reason: str) -> None:
        """Ask the session to end (its first reason is the one kept)."""
        if self._reason is None:
            self._reason = reason
        self._ended.set()

    async def run(self) -> str:
        """Run until the session ends; why it ended, for the log."""
        outputs = [asyncio.create_task(self._copy_out(fd, channel)) for fd, channel in self._process.outputs]
        watching = watch_stream(self._stream, self._idle_timeout_s, self.end)
        helpers = [asyncio.create_task(self._copy_in()), asyncio.create_task(watching)]
        exited = asyncio.create_task(commands.exited(self._process.popen))
        ending = asyncio.create_task(self._ended.wait())
        returncode = SIGNALLED + 9
        try:
            await asyncio.wait({exited, ending}, return_when=asyncio.FIRST_COMPLETED)
            if not exited.done():
                self._process.hang_up()
                await asyncio.wait({exited}, timeout=HANG_UP_GRACE_S)
            await self._kill_session()
            returncode = await exited
            if (returncode > SIGNALLED or returncode < 0) and self._reason is None:
                await asyncio.wait({ending}, timeout=TASK_END_GRACE_S)
            await asyncio.wait(outputs, timeout=DRAIN_S)
        finally:
            pending = [*outputs, *helpers, exited, ending]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            if exited.cancelled():
                self._kill_now()
                await self._stream.close("the node's agent stopped")
            self._process.close_fds()
        return await self._say_end(returncode)

    async def _say_end(self, returncode: int) -> str:
        signal = -returncode if returncode < 0 else None
        self.exit_code = None if signal else returncode
        reason = self._reason or ""
        status = exit_status(self.exit_code, signal=signal, message=reason)
        with contextlib.suppress(StreamClosed):
            await self._stream.send(Channel.STATUS, status)
        await self._stream.close(reason)
        return reason or f"the command exited with {returncode}"

    async def _kill_session(self) -> None:
        leader = self._process.session_leader()
        if leader is not None:
            await asyncio.to_thread(commands.kill_session, leader)

    def _kill_now(self) -> None:
        """Cancelled (the agent stopping): nothing the session started may outlive it."""
        with contextlib.suppress(ProcessLookupError):
            self._process.popen.kill()
        leader = self._process.session_leader()
        if leader is not None:
            commands.kill_session(leader)
        with contextlib.suppress(Exception):
            self._process.popen.wait(5)

    async def _copy_out(self, fd: int, channel: Channel) -> None:
        while data := await fds.read_some(fd, MAX_DATA):
            try:
                await self._stream.send(channel, data)
            except StreamClosed:
                self.end(self._stream.close_reason or "the client closed the stream")
                return

    async def _copy_in(self) -> None:
        while (frame := await self._stream.receive()) is not None:
            channel, data = frame
            try:
                await self._take(channel, data)
            except MalformedFrame as exc:
                self.end(f"a malformed frame: {exc}")
                return
        self.end(self._stream.close_reason or "the client closed the stream")

    async def _take(self, channel: int, data: bytes) -> None:
        match channel:
            case Channel.STDIN:
                if self._process.stdin is not None and data:
                    with contextlib.suppress(BrokenPipeError):  # the command closed its stdin
                        await fds.write_all(self._process.stdin, data)
            case Channel.RESIZE:
                cols, rows = parse_resize(data)
                self._process.resize(cols, rows)
            case Channel.EOF:
                self._process.close_stdin()
            case _:
                raise MalformedFrame(f"channel {channel} carries nothing to a command")
