"""One tail of the lifecycle streams per API process, fanned out to every SSE subscriber.

Why not one NATS consumer per SSE connection: a JetStream consumer is server state
(created, heart-beaten, flow-controlled, deleted), so a thousand dashboards would mean a
thousand consumers and a thousand copies of every event on the wire, and a connection
storm after an API restart would be a consumer-creation storm. Instead each API process
keeps exactly one *ordered* consumer per lifecycle stream (``CORRAL_JOBS``,
``CORRAL_NODES``, ``CORRAL_ALERTS``: three in all), reads each event once, works out its
facts once (type, job, owner, VC: ``scope.py``), and hands it to the in-process
queue of every subscriber whose filter and visibility match. A new subscriber costs a
dictionary entry; fanning one event out to 1,000 of them is 1,000 predicate calls.

Exact resumption: an SSE id is a ``Cursor``, the last stream sequence the subscriber has
had of each of the three streams (``"120.7.3"``). The tails are per stream and in
stream order, so "everything of stream *s* up to *n*" is a complete description of what
was sent. A subscriber that comes back with ``Last-Event-ID`` registers first (from then
on the tail queues what it must see), then reads what it missed from JetStream itself —
a short-lived ephemeral consumer from its cursor up to the tail's position at
registration (``replay``) — and then drains its queue, skipping anything at or below
what it has sent: no gap, no duplicate. The same catch-up handles a subscriber too slow
for its bounded queue: the tail drops its queue rather than waiting for it (one slow
client never holds up the others), and the subscriber catches up from JetStream again.

Tails only while someone follows: the three ordered consumers start when a stream
asks for them (``wait_ready``, before it registers) and stop once no subscriber has
been registered for ``idle_s``: tailing with nobody to hand events to would cost the API
CPU for every job, and NATS a push of every lifecycle event, for nothing. A restarted
tail starts at each stream's last sequence, so a subscriber registering then starts
exactly where it asked; one resuming from an older cursor reads the gap from JetStream,
as after any reconnect.

Concurrency: one task per stream tail (under ``run``); registration, the position
update and the fan-out of one event happen with no ``await`` in between, so a
subscriber's starting position is exact. Single event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from services.api.events.scope import EventFacts, Scopes
from shared.aio import raise_if_cancelling, wait_event
from shared.bus.streams import ALERTS, JOBS, NODES, StreamSpec
from shared.db.pool import DATABASE_ERRORS
from shared.errors import InvalidInput

log = logging.getLogger(__name__)

LIFECYCLE: tuple[StreamSpec, ...] = (JOBS, NODES, ALERTS)
REPLAY_BATCH = 256
FAN_OUT_BATCH = 256
# Tails stop after this long with no subscriber (and no stream asking for them): long
# enough that clients reconnecting, or polling dashboards, do not restart them each time
# (CORRAL_API_SSE_TAIL_IDLE_S).
IDLE_S = 60.0
# The server beats each tail this often while it is quiet; the client remakes an ordered
# consumer that missed two beats (nats-py). That is how a tail finds its consumer gone
# with a restarted NATS, so this bounds how long SSE subscribers wait for events after a
# NATS crash; it costs three small messages a second (one tail per stream).
TAIL_HEARTBEAT_S = 1.0
TAIL_GONE_AFTER_S = 2.0


@dataclass(frozen=True)
class Cursor:
    """The last sequence sent of each lifecycle stream, in ``LIFECYCLE`` order."""

    positions: tuple[int, ...]

    def encode(self) -> str:
        return ".".join(str(p) for p in self.positions)

    @classmethod
    def parse(cls, text: str) -> Cursor:
        parts = text.strip().split(".")
        if len(parts) != len(LIFECYCLE) or not all(p.isdigit() and len(p) <= 19 for p in parts):
            raise InvalidInput(
                f"Last-Event-ID {text[:80]!r} is not an id this stream sent; send the id of the last"
                " event you received, or none to start from now"
            )
        return cls(tuple(int(p) for p in parts))

    def advanced(self, stream: int, seq: int) -> Cursor:
        positions = list(self.positions)
        positions[stream] = max(positions[stream], seq)
        return Cursor(tuple(positions))


@dataclass(frozen=True)
class StreamEvent:
    stream: int  # index into LIFECYCLE
    seq: int
    payload: bytes  # the CloudEvents document exactly as it is on NATS
    facts: EventFacts


@dataclass(eq=False)
class Subscriber:
    """One SSE connection's queue; ``start`` is the tail's position at registration."""

    wants: Callable[[EventFacts], bool]
    start: Cursor
    limit: int
    pending: deque[StreamEvent] = field(default_factory=deque)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    overflowed: bool = False

    def offer(self, event: StreamEvent) -> bool:
        """Queue an event; False when the queue is full (the subscriber must catch up)."""
        if len(self.pending) >= self.limit:
            self.overflowed = True
            self.pending.clear()
            self.arrived.set()
            return False
        self.pending.append(event)
        self.arrived.set()
        return True

    async def next_batch(self, timeout_s: float) -> list[StreamEvent]:
        """Every queued event, in order, once there is one; empty after ``timeout_s`` (or
        once overflowed).

        All at once, so a stream behind by several events sends them in one write: with
        1,000 subscribers an event costs 1,000 socket writes, and a burst would otherwise
        cost that many per event. The wait is ``asyncio.timeout`` around the event rather
        than ``wait_for``, which would start a task per wait — per event per subscriber."""
        if not self.pending and not self.overflowed:
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self.arrived.wait()
        if self.overflowed:
            return []
        batch = list(self.pending)
        self.pending.clear()
        return batch


class EventHub:
    def __init__(
        self, js: JetStreamContext, scopes: Scopes, queue_limit: int = 10_000, idle_s: float = IDLE_S
    ) -> None:
        self._js = js
        self.scopes = scopes
        self._queue_limit = queue_limit
        self._idle_s = idle_s
        self._subscribers: set[Subscriber] = set()
        self._positions = [0] * len(LIFECYCLE)
        self._started = [asyncio.Event() for _ in LIFECYCLE]
        self._wanted = asyncio.Event()  # a stream asked for the tails
        self._last_wanted = -math.inf  # loop time of the last ask, registration or departure
        self.delivered = 0
        self.overflows = 0  # subscribers sent back to JetStream for being too slow

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    @property
    def tailing(self) -> bool:
        return all(started.is_set() for started in self._started)

    async def wait_ready(self, timeout_s: float) -> bool:
        """Start the tails if they stopped; whether every tail is reading (a subscriber
        registering next then starts exactly where the streams are)."""
        self._last_wanted = asyncio.get_running_loop().time()
        self._wanted.set()
        for started in self._started:
            if not await wait_event(started, timeout_s):
                return False
        return True

    @property
    def position(self) -> Cursor:
        """How far the tails have read: a page rendered now and following from here
        (``portal/live.py``) knows whether anything came in between."""
        return Cursor(tuple(self._positions))

    @property
    def js(self) -> JetStreamContext:
        """The JetStream context, for one-off reads (a job's history: ``jobs/history.py``)."""
        return self._js

    def register(self, wants: Callable[[EventFacts], bool]) -> Subscriber:
        subscriber = Subscriber(wants, Cursor(tuple(self._positions)), self._queue_limit)
        self._subscribers.add(subscriber)
        self._last_wanted = asyncio.get_running_loop().time()
        return subscriber

    def unregister(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)
        self._last_wanted = asyncio.get_running_loop().time()

    async def run(self) -> None:
        """Tail every lifecycle stream while anyone follows them, until cancelled."""
        while True:
            await self._wanted.wait()
            tails = [
                asyncio.create_task(self._tail(index, spec), name=f"event-hub-{spec.name}")
                for index, spec in enumerate(LIFECYCLE)
            ]
            idle = asyncio.create_task(self._until_idle(), name="event-hub-idle")
            try:
                done, _ = await asyncio.wait([*tails, idle], return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (*tails, idle):
                    task.cancel()
                await asyncio.gather(*tails, idle, return_exceptions=True)
            for task in done:
                if task is not idle:
                    task.result()  # a tail that failed: raise it (the API's task group decides)
            log.info("no event stream followed for %.0fs: the hub stops tailing", self._idle_s)

    async def _until_idle(self) -> None:
        """Return once no subscriber has been registered, and no stream has asked for
        the tails, for ``idle_s``."""
        loop = asyncio.get_running_loop()
        while True:
            quiet_until = self._last_wanted + self._idle_s
            if not self._subscribers and loop.time() >= quiet_until:
                # Not ready from this moment: a stream asking now waits for new tails.
                self._wanted.clear()
                for started in self._started:
                    started.clear()
                return
            await asyncio.sleep(max(quiet_until - loop.time(), self._idle_s / 4))

    async def _tail(self, index: int, spec: StreamSpec) -> None:
        info = await self._js.stream_info(spec.name)
        self._positions[index] = info.state.last_seq
        # An ordered consumer: no acks, flow control and heartbeats, and the client
        # recreates it from the last sequence it saw if a message goes missing or the
        # server restarts — the tail itself never skips.
        config = api.ConsumerConfig(
            filter_subjects=list(spec.subjects),
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=info.state.last_seq + 1,
            # Gone from the server this soon after the tail stops (unsubscribing leaves
            # an ordered consumer to the server's clean-up; its default is 5 s).
            inactive_threshold=TAIL_GONE_AFTER_S,
        )
        sub = await self._js.subscribe(
            spec.subjects[0],
            stream=spec.name,
            ordered_consumer=True,
            config=config,
            idle_heartbeat=TAIL_HEARTBEAT_S,
        )
        self._started[index].set()
        try:
            while True:
                try:
                    batch = await self._next_messages(sub)
                except nats.errors.TimeoutError:
                    raise_if_cancelling()
                    continue
                for msg in batch:
                    seq = msg.metadata.sequence.stream
                    if seq <= self._positions[index]:
                        continue  # seen before a consumer reset
                    if not self._subscribers:
                        # Nobody to hand it to: only the position moves (with no await
                        # before, so a subscriber registering next starts exactly here).
                        # Its facts (parsed, its job's owner looked up) would be work for
                        # nobody.
                        self._positions[index] = seq
                        continue
                    facts = await self._facts(msg)
                    self._positions[index] = seq
                    if facts is not None:
                        self._fan_out(StreamEvent(index, seq, msg.data, facts))
        finally:
            self._started[index].clear()
            await sub.unsubscribe()

    @staticmethod
    async def _next_messages(sub: JetStreamContext.PushSubscription) -> list[Msg]:
        """The next message, and every one already waiting behind it (up to
        ``FAN_OUT_BATCH``), before any is fanned out.

        nats-py hands over one message per turn of the event loop (``next_msg`` runs a
        task each time), and every subscriber woken by the previous event runs in that
        turn: fanned out one by one, a burst would cost a socket write per event per
        subscriber. Taken together, each subscriber's queue holds them all when it wakes,
        and it sends them in one write (``Subscriber.next_batch``)."""
        batch = [await sub.next_msg(timeout=None)]
        while sub.pending_msgs and len(batch) < FAN_OUT_BATCH:
            batch.append(await sub.next_msg(timeout=None))
        return batch

    async def _facts(self, msg: Msg) -> EventFacts | None:
        """The event's facts; while Postgres is away the tail waits (skipping the event
        would hide it from its owner for good)."""
        while True:
            try:
                return await self.scopes.facts(msg.data)
            except DATABASE_ERRORS as exc:
                raise_if_cancelling()
                log.warning("event hub cannot read job owners (%s); retrying", exc)
                await asyncio.sleep(1.0)

    def _fan_out(self, event: StreamEvent) -> None:
        for subscriber in list(self._subscribers):
            if subscriber.wants(event.facts):
                if subscriber.offer(event):
                    self.delivered += 1
                else:  # too slow: it catches up from JetStream instead
                    self._subscribers.discard(subscriber)
                    self.overflows += 1

    async def oldest_kept(self, stream: int) -> int:
        """The first sequence the stream still holds (older events expired)."""
        info = await self._js.stream_info(LIFECYCLE[stream].name)
        return int(info.state.first_seq)

    async def replay(self, stream: int, after: int, until: int) -> AsyncGenerator[StreamEvent, None]:
        """The events of one stream with sequence in (``after``, ``until``], read from
        JetStream through a short-lived ephemeral consumer."""
        if until <= after:
            return
        spec = LIFECYCLE[stream]
        config = api.ConsumerConfig(
            filter_subjects=list(spec.subjects),
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=after + 1,
            ack_policy=api.AckPolicy.NONE,
            inactive_threshold=60.0,  # the server removes it if we vanish without deleting it
            mem_storage=True,
        )
        sub = await self._js.pull_subscribe(spec.subjects[0], stream=spec.name, config=config)
        try:
            while True:
                try:
                    msgs = await sub.fetch(REPLAY_BATCH, timeout=5.0)
                except nats.errors.TimeoutError:
                    raise_if_cancelling()
                    return  # nothing more is kept (the rest expired or was deleted)
                for msg in msgs:
                    seq = msg.metadata.sequence.stream
                    if seq > until:
                        return
                    facts = await self._facts(msg)
                    if facts is not None:
                        yield StreamEvent(stream, seq, msg.data, facts)
                    if seq == until or msg.metadata.num_pending == 0:
                        return
        finally:
            await sub.unsubscribe()
            if config.name:
                await self._delete_consumer(spec.name, config.name)

    async def _delete_consumer(self, stream: str, name: str) -> None:
        try:
            await self._js.delete_consumer(stream, name)
        except (nats.errors.Error, TimeoutError) as exc:
            log.info("replay consumer %s not deleted now (%r); the server drops it when idle", name, exc)
