"""The consumer loop: fetch, parse, handle, settle — with explicit outcomes.

- handler returns → ``ack``;
- handler raises ``TransientError(delay_s)`` → ``nak`` with that delay;
- the message does not parse/validate, or the handler raises ``PermanentError`` →
  record it as a dead letter with the reason, then ``term`` (never redelivered);
- the database is unavailable (Postgres restarting, or refusing for want of a resource
  such as disk space) → ``nak`` after a pause, and never a dead letter: that is nobody's
  poison;
- any other exception → ``nak`` with a growing delay, and after ``max_deliver``
  deliveries it is dead-lettered too. Nothing is redelivered forever.

Handlers get the typed event and must be idempotent (see ``shared/idempotency.py``).
The loop itself never dies of a bad message; it only stops when cancelled.

``concurrency``: how many messages of a fetch are handled at once (1: one after
another). Messages whose subjects end in the same token (the aggregate: a job's id for
``corral.job.*``; a consumer of subjects ending otherwise must not set it) are always
handled in the order they came, one at a time; only different aggregates' overlap. A
handler that waits on Postgres round trips most of its time then stops holding up the
rest of the stream behind it (the launcher's placements).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import ValidationError

from shared.aio import raise_if_cancelling
from shared.bus.protocol import Bus, ConsumerConfig, Delivery
from shared.db.pool import DATABASE_UNAVAILABLE
from shared.errors import PermanentError, TransientError
from shared.events.types import Event, parse_event
from shared.logs import bound_job
from shared.metrics import EVENT_HANDLING, EVENTS_CONSUMED, EVENTS_REDELIVERED
from shared.telemetry import consume_span, destination_template

log = logging.getLogger(__name__)

Handler = Callable[[Event], Awaitable[None]]


class DeadLetterSink(Protocol):
    async def record(self, consumer: str, delivery: Delivery, reason: str) -> None: ...


@dataclass(frozen=True)
class ConsumerSpec:
    config: ConsumerConfig
    handler: Handler
    batch: int = 64
    fetch_timeout_s: float = 1.0
    concurrency: int = 1


@dataclass
class ConsumerStats:
    acked: int = 0
    nacked: int = 0
    dead_lettered: int = 0


async def run_consumer(
    bus: Bus, spec: ConsumerSpec, dead_letters: DeadLetterSink, stats: ConsumerStats | None = None
) -> None:
    """Consume forever (until cancelled)."""
    stats = stats or ConsumerStats()
    subscription = await bus.subscribe(spec.config)
    while True:
        # A client library that swallowed our cancellation must not keep us looping.
        raise_if_cancelling()
        try:
            deliveries = await subscription.fetch(spec.batch, spec.fetch_timeout_s)
        except (ConnectionError, OSError, TimeoutError) as exc:
            raise_if_cancelling()
            log.warning("fetch on %s failed (%s); retrying", spec.config.durable, exc)
            await asyncio.sleep(1.0)
            continue
        if spec.concurrency <= 1 or len(deliveries) <= 1:
            for delivery in deliveries:
                await _settle(delivery, spec, dead_letters, stats)
        else:
            await _settle_side_by_side(deliveries, spec, dead_letters, stats)


def aggregate_of(subject: str) -> str:
    """What a message is about, from its subject (``corral.job.scheduled.<job>``)."""
    return subject.rsplit(".", 1)[-1]


async def _settle_side_by_side(
    deliveries: Sequence[Delivery], spec: ConsumerSpec, dead_letters: DeadLetterSink, stats: ConsumerStats
) -> None:
    """Settle a fetch's messages ``spec.concurrency`` at a time, each aggregate's in order."""
    in_order: dict[str, list[Delivery]] = {}
    for delivery in deliveries:
        in_order.setdefault(aggregate_of(delivery.subject), []).append(delivery)
    slots = asyncio.Semaphore(spec.concurrency)

    async def settle_in_order(queue: list[Delivery]) -> None:
        for delivery in queue:
            async with slots:
                await _settle(delivery, spec, dead_letters, stats)

    # Every lane runs to its end even when one fails (an ack NATS refused): a failure
    # must not cancel other jobs' handlers mid-transaction. Then the first is raised, as
    # one after another would have.
    lanes = [settle_in_order(queue) for queue in in_order.values()]
    for outcome in await asyncio.gather(*lanes, return_exceptions=True):
        if isinstance(outcome, BaseException):
            raise outcome


async def _settle(
    delivery: Delivery, spec: ConsumerSpec, dead_letters: DeadLetterSink, stats: ConsumerStats
) -> None:
    durable = spec.config.durable
    try:
        event = parse_event(delivery.data)
    except ValidationError as exc:
        reason = f"invalid event: {_short(exc)}"
        log.error("dead-lettering message on %s: %s", delivery.subject, reason)
        await _dead_letter(dead_letters, durable, delivery, reason, stats)
        return

    if delivery.num_delivered > 1:
        EVENTS_REDELIVERED.labels(durable).inc()
    job_id = getattr(event.data, "job_id", None)
    attributes: dict[str, str | int] = {
        "messaging.system": "nats",
        "messaging.operation.type": "process",
        "messaging.destination.name": delivery.subject,
        "messaging.destination.template": destination_template(delivery.subject),
        "messaging.consumer.group.name": durable,
        "messaging.message.id": event.id,
        "messaging.message.delivery_count": delivery.num_delivered,
    }
    if job_id is not None:
        attributes["corral.job.id"] = job_id
    with (
        consume_span(f"process {destination_template(delivery.subject)}", delivery.headers, attributes),
        bound_job(job_id),
        EVENT_HANDLING.labels(durable).time(),
    ):
        try:
            await spec.handler(event)
        except TransientError as exc:
            log.info("%s: %s; retrying in %.1fs", durable, exc.detail, exc.delay_s)
            await delivery.nak(exc.delay_s)
            _note(stats, durable, "nacked")
            return
        except DATABASE_UNAVAILABLE as exc:
            # Postgres restarting is nobody's poison: never dead-letter for it. Back off so
            # the loop does not spin through deliveries while the database is away.
            raise_if_cancelling()
            log.warning("%s: database unavailable (%s); redelivering later", durable, exc)
            await delivery.nak(2.0)
            _note(stats, durable, "nacked")
            await asyncio.sleep(1.0)
            return
        except PermanentError as exc:
            await _dead_letter(dead_letters, durable, delivery, f"permanent error: {exc.detail}", stats)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise_if_cancelling()
            if delivery.num_delivered >= spec.config.max_deliver:
                reason = f"gave up after {delivery.num_delivered} deliveries: {exc!r}"
                await _dead_letter(dead_letters, durable, delivery, reason, stats)
                return
            delay = min(30.0, 0.5 * 2 ** (delivery.num_delivered - 1))
            log.exception("%s: handler failed on %s; retry in %.1fs", durable, event.type, delay)
            await delivery.nak(delay)
            _note(stats, durable, "nacked")
            return
    await delivery.ack()
    _note(stats, durable, "acked")


async def _dead_letter(
    sink: DeadLetterSink, durable: str, delivery: Delivery, reason: str, stats: ConsumerStats
) -> None:
    """Record, then terminate; if the record cannot be written, keep the message instead."""
    try:
        await sink.record(durable, delivery, reason)
    except DATABASE_UNAVAILABLE as exc:
        raise_if_cancelling()
        log.warning("%s: cannot record a dead letter now (%s); redelivering later", durable, exc)
        await delivery.nak(5.0)
        _note(stats, durable, "nacked")
        return
    await delivery.term()
    _note(stats, durable, "dead_lettered")


def _note(stats: ConsumerStats, durable: str, outcome: str) -> None:
    setattr(stats, outcome, getattr(stats, outcome) + 1)
    EVENTS_CONSUMED.labels(durable, outcome).inc()


def _short(exc: ValidationError) -> str:
    errors = exc.errors()[:3]
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in errors)
