"""An in-memory bus with JetStream's semantics, for unit tests of handlers and loops.

It keeps what services rely on: streams bound to subject filters, ``Nats-Msg-Id``
de-duplication, durable consumers that resume where they were, explicit ack, nak with
delay, term, ack-wait expiry and ``max_deliver``. The same contract tests
(``tests/shared/test_bus_contract.py``) run against it and against real NATS, so it
cannot drift from the real thing unnoticed. Single event loop only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from shared.aio import wait_event
from shared.bus.protocol import ConsumerConfig, Delivery, Subscription
from shared.bus.streams import STREAMS, StreamSpec


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS wildcard matching: ``*`` is one token, a final ``>`` is one or more."""
    want, have = pattern.split("."), subject.split(".")
    for position, part in enumerate(want):
        if part == ">":
            return len(have) > position
        if position >= len(have) or part not in ("*", have[position]):
            return False
    return len(want) == len(have)


@dataclass(frozen=True)
class _Stored:
    seq: int
    subject: str
    data: bytes
    headers: dict[str, str]
    stored_at: float = field(default_factory=time.time)  # wall clock, as JetStream stamps it


@dataclass
class _Pending:
    deliveries: int
    redeliver_at: float


@dataclass
class _Consumer:
    config: ConsumerConfig
    cursor: int = 0  # index into the stream's messages of the next new one
    pending: dict[int, _Pending] = field(default_factory=dict)


class MemoryDelivery:
    def __init__(self, consumer: _Consumer, message: _Stored, deliveries: int) -> None:
        self._consumer = consumer
        self._message = message
        self._deliveries = deliveries

    @property
    def subject(self) -> str:
        return self._message.subject

    @property
    def data(self) -> bytes:
        return self._message.data

    @property
    def headers(self) -> dict[str, str]:
        return dict(self._message.headers)

    @property
    def num_delivered(self) -> int:
        return self._deliveries

    @property
    def stream_seq(self) -> int | None:
        return self._message.seq

    async def ack(self) -> None:
        self._consumer.pending.pop(self._message.seq, None)

    async def nak(self, delay_s: float) -> None:
        pending = self._consumer.pending.get(self._message.seq)
        if pending is not None:
            pending.redeliver_at = time.monotonic() + delay_s

    async def term(self) -> None:
        self._consumer.pending.pop(self._message.seq, None)


class MemorySubscription:
    def __init__(self, bus: MemoryBus, stream: StreamSpec, consumer: _Consumer) -> None:
        self._bus = bus
        self._stream = stream
        self._consumer = consumer

    def _ready(self, batch: int) -> list[Delivery]:
        now = time.monotonic()
        config = self._consumer.config
        messages = self._bus.messages[self._stream.name]
        out: list[Delivery] = []
        for seq, pending in sorted(self._consumer.pending.items()):
            if len(out) >= batch:
                return out
            if pending.redeliver_at <= now:  # like the NATS bus: no server-side limit
                pending.deliveries += 1
                pending.redeliver_at = now + config.ack_wait_s
                out.append(MemoryDelivery(self._consumer, messages[seq - 1], pending.deliveries))
        while len(out) < batch and self._consumer.cursor < len(messages):
            message = messages[self._consumer.cursor]
            self._consumer.cursor += 1
            if any(subject_matches(f, message.subject) for f in config.filter_subjects):
                self._consumer.pending[message.seq] = _Pending(1, now + config.ack_wait_s)
                out.append(MemoryDelivery(self._consumer, message, 1))
        return out

    async def fetch(self, batch: int, timeout_s: float) -> Sequence[Delivery]:
        deadline = time.monotonic() + timeout_s
        while True:
            ready = self._ready(batch)
            if ready or time.monotonic() >= deadline:
                return ready
            # Wake on a publish, or soon anyway for nak delays and ack-wait expiries.
            self._bus.published.clear()
            await wait_event(self._bus.published, min(0.05, deadline - time.monotonic()))


class MemoryBus:
    def __init__(self, duplicate_window_s: float = 120.0) -> None:
        self.messages: dict[str, list[_Stored]] = {}
        self._consumers: dict[tuple[str, str], _Consumer] = {}
        self._seen_ids: dict[str, float] = {}
        self._window_s = duplicate_window_s
        self.published = asyncio.Event()

    async def ensure_streams(self) -> None:
        for spec in STREAMS:
            self.messages.setdefault(spec.name, [])

    def _stream_for(self, subject: str) -> StreamSpec | None:
        return next((s for s in STREAMS if any(subject_matches(p, subject) for p in s.subjects)), None)

    async def publish(
        self, subject: str, payload: bytes, *, msg_id: str, headers: dict[str, str] | None = None
    ) -> None:
        stream = self._stream_for(subject)
        if stream is None or stream.name not in self.messages:
            raise LookupError(f"no stream for subject {subject!r}")
        now = time.monotonic()
        seen = self._seen_ids.get(msg_id)
        if seen is not None and now - seen < self._window_s:
            return  # a duplicate inside the window: dropped, like JetStream
        self._seen_ids[msg_id] = now
        messages = self.messages[stream.name]
        all_headers = {**(headers or {}), "Nats-Msg-Id": msg_id}
        messages.append(_Stored(len(messages) + 1, subject, payload, all_headers))
        self.published.set()

    async def subscribe(self, config: ConsumerConfig) -> Subscription:
        stream = next(s for s in STREAMS if s.name == config.stream)
        key = (config.stream, config.durable)
        consumer = self._consumers.get(key)
        if consumer is None:
            messages = self.messages[config.stream]
            start = 0 if config.deliver_all else len(messages)
            if not config.deliver_all and config.start_time is not None:
                since = config.start_time.timestamp()
                start = next((m.seq - 1 for m in messages if m.stored_at >= since), len(messages))
            consumer = self._consumers[key] = _Consumer(config, cursor=start)
        return MemorySubscription(self, stream, consumer)

    async def delete_consumer(self, stream: str, durable: str) -> None:
        self._consumers.pop((stream, durable), None)

    async def close(self) -> None:
        return None
