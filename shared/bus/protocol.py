"""What services need from a message bus, independent of NATS.

Delivery is at-least-once; a ``Delivery`` must be settled exactly one way: ``ack``
(done), ``nak(delay)`` (redeliver later) or ``term`` (never redeliver — the consumer
loop dead-letters it first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class ConsumerConfig:
    """A durable pull consumer on one stream."""

    stream: str
    durable: str
    filter_subjects: tuple[str, ...]
    ack_wait_s: float = 30.0
    max_deliver: int = 10
    # Consumers of a new durable see only new messages by default; "all" replays.
    deliver_all: bool = True
    # Not replaying all: a durable created anew starts at the messages stored since this
    # time (timezone-aware), not at the next one.
    start_time: datetime | None = None
    # How many processes pull from this durable at once (several launchers): each asks
    # for its share of the backlog it is told of, not all of it (NatsSubscription).
    sharers: int = 1


class Delivery(Protocol):
    @property
    def subject(self) -> str: ...

    @property
    def data(self) -> bytes: ...

    @property
    def headers(self) -> dict[str, str]: ...

    @property
    def num_delivered(self) -> int: ...

    @property
    def stream_seq(self) -> int | None: ...

    async def ack(self) -> None: ...

    async def nak(self, delay_s: float) -> None: ...

    async def term(self) -> None: ...


class Subscription(Protocol):
    async def fetch(self, batch: int, timeout_s: float) -> Sequence[Delivery]: ...


class Bus(Protocol):
    async def ensure_streams(self) -> None: ...

    async def publish(
        self, subject: str, payload: bytes, *, msg_id: str, headers: dict[str, str] | None = None
    ) -> None: ...

    async def subscribe(self, config: ConsumerConfig) -> Subscription: ...

    async def delete_consumer(self, stream: str, durable: str) -> None:
        """Forget a durable consumer and where it stood (none by that name: nothing to do)."""
        ...

    async def close(self) -> None: ...
