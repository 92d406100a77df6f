"""One end of an interactive stream between the API and a node, over core NATS.

Core NATS delivers in order from one publisher to one subscriber, but drops messages
for a subscriber that falls too far behind, and says nothing to the publisher. A
terminal or a forwarded connection must neither lose nor reorder a byte, so each end:

- numbers its frames, and closes the stream (with the reason) at the first gap rather
  than pass on corrupted data;
- sends data only within a window of credit: the receiver grants credit back as its
  reader takes frames out, so a slow reader (a user's laptop on a slow link) slows the
  writer (the task's output) instead of overrunning NATS's buffers;
- refuses more than the window from a peer that ignores it (a node is less trusted than
  the API: it must not be able to fill the API's memory);
- pings every ``ping_s`` and closes a stream whose peer stayed silent for
  ``dead_after_s`` (a node lost, an API process killed), so nothing waits for ever.

Channels 0-4 carry the session's own frames (``protocol.Channel``); ``receive`` returns
those and ``EOF``; credit, pings and close are handled here.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from shared.interactive.protocol import MAX_DATA, Channel, MalformedFrame, decode, encode

WINDOW_BYTES = 4 * 1024 * 1024
_CREDIT = struct.Struct(">I")
# Frames whose bytes count against the window (the ones a reader takes out).
_COUNTED = frozenset(
    {Channel.STDIN, Channel.STDOUT, Channel.STDERR, Channel.STATUS, Channel.RESIZE, Channel.EOF}
)


class StreamClosed(Exception):
    """The stream is closed; ``StreamEnd.close_reason`` says why."""


class StreamEnd:
    """One end: frames go out on ``send_subject`` and come in on ``recv_subject``.

    ``send`` and ``receive`` may be used by different tasks at once (a reader of the
    process's output and a writer of the user's keystrokes). ``close`` may be called from
    anywhere, any number of times."""

    def __init__(
        self,
        nc: Client,
        *,
        send_subject: str,
        recv_subject: str,
        window: int = WINDOW_BYTES,
        ping_s: float = 5.0,
        dead_after_s: float = 20.0,
    ) -> None:
        self._nc = nc
        self._send_subject = send_subject
        self._recv_subject = recv_subject
        self._window = window
        self._ping_s = ping_s
        self._dead_after_s = dead_after_s
        self._sub: Subscription | None = None
        self._frames: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self._send_lock = asyncio.Lock()
        self._credit = asyncio.Condition()
        self._next_out = 0
        self._next_in = 0
        self._in_flight = 0  # bytes sent that the peer has not yet granted back
        self._taken = 0  # bytes our reader took out, not yet granted back
        self._queued = 0  # bytes received, not yet taken out
        self._heard = time.monotonic()
        self._pinger: asyncio.Task[None] | None = None
        self.close_reason: str | None = None
        self.last_data = time.monotonic()
        self.bytes_sent = 0
        self.bytes_received = 0

    @property
    def closed(self) -> bool:
        return self.close_reason is not None

    async def open(self) -> None:
        """Subscribe, before the peer may send anything."""
        self._sub = await self._nc.subscribe(self._recv_subject, cb=self._on_message)
        self._heard = time.monotonic()
        self._pinger = asyncio.create_task(self._keep_alive(), name=f"ping {self._send_subject}")

    async def send(self, channel: int, data: bytes = b"") -> None:
        """Send ``data`` on ``channel`` (in frames of at most ``MAX_DATA``), waiting for
        credit as needed. ``StreamClosed`` once the stream is closed."""
        if not data:
            await self._send_counted(channel, b"")
            return
        for start in range(0, len(data), MAX_DATA):
            await self._send_counted(channel, data[start : start + MAX_DATA])

    async def receive(self) -> tuple[int, bytes] | None:
        """The next frame of channels 0-4 or ``EOF``, in order; None once closed."""
        if self.closed and self._frames.empty():
            return None
        frame = await self._frames.get()
        if frame is None:
            self._frames.put_nowait(None)  # every later call also sees the end
            return None
        await self._took(len(frame[1]))
        return frame

    async def close(self, reason: str = "") -> None:
        """Say ``reason`` to the peer (once) and stop. Frames already received can still
        be taken out with ``receive``."""
        if self.closed:
            return
        with contextlib.suppress(Exception):  # a broken connection: the peer's pings notice
            async with self._send_lock:
                await self._publish(Channel.CLOSE, reason.encode()[:4096])
        await self._end(reason)

    async def _send_counted(self, channel: int, chunk: bytes) -> None:
        size = len(chunk)
        async with self._credit:
            await self._credit.wait_for(lambda: self.closed or self._in_flight + size <= self._window)
            if self.closed:
                raise StreamClosed(self.close_reason)
            self._in_flight += size
        async with self._send_lock:
            if self.closed:
                raise StreamClosed(self.close_reason)
            await self._publish(channel, chunk)
        if channel != Channel.STATUS:
            self.last_data = time.monotonic()
        self.bytes_sent += size

    async def _publish(self, channel: int, data: bytes) -> None:
        frame = encode(self._next_out, channel, data)
        self._next_out += 1
        await self._nc.publish(self._send_subject, frame)

    async def _took(self, size: int) -> None:
        self._queued -= size
        self._taken += size
        # Grant credit back in quarters of the window: one frame back per many taken. What
        # is left ungranted is under a quarter, so the sender always has room to go on.
        if self._taken >= self._window // 4:
            granted, self._taken = self._taken, 0
            with contextlib.suppress(Exception):
                async with self._send_lock:
                    if not self.closed:
                        await self._publish(Channel.CREDIT, _CREDIT.pack(granted))

    async def _on_message(self, msg: Msg) -> None:
        if self.closed:
            return
        self._heard = time.monotonic()
        try:
            seq, channel, data = decode(msg.data)
        except MalformedFrame as exc:
            await self.close(f"a malformed frame from the other end: {exc}")
            return
        if seq != self._next_in:
            await self.close(f"lost frames: expected frame {self._next_in}, got {seq}")
            return
        self._next_in += 1
        match channel:
            case Channel.PING:
                return
            case Channel.CREDIT:
                if len(data) != _CREDIT.size:
                    await self.close("a malformed credit frame from the other end")
                    return
                (granted,) = _CREDIT.unpack(data)
                async with self._credit:
                    self._in_flight = max(0, self._in_flight - granted)
                    self._credit.notify_all()
            case Channel.CLOSE:
                await self._end(data.decode(errors="replace"))
            case _:
                # A peer that keeps to the window never has more than it queued here; one
                # that does not (a node that is not to be trusted) would fill this
                # process's memory, so it is cut off.
                self._queued += len(data)
                if self._queued + self._taken > self._window:
                    await self.close(f"the other end sent more than its window of {self._window} bytes")
                    return
                if channel != Channel.STATUS:
                    self.last_data = time.monotonic()
                self.bytes_received += len(data)
                self._frames.put_nowait((channel, data))

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self._ping_s)
            if self.closed:
                return
            if time.monotonic() - self._heard > self._dead_after_s:
                await self.close(f"the other end went silent for {self._dead_after_s:g} s")
                return
            with contextlib.suppress(Exception):
                async with self._send_lock:
                    await self._publish(Channel.PING, b"")

    async def _end(self, reason: str) -> None:
        if self.closed:
            return
        self.close_reason = reason
        self._frames.put_nowait(None)
        async with self._credit:
            self._credit.notify_all()
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        if self._pinger is not None and self._pinger is not asyncio.current_task():
            self._pinger.cancel()
