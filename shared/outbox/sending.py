"""Publishing outbox rows to JetStream, never one ack round trip per row: pipelined (in
order on the one connection, acks awaited together: what a process publishes on commit)
or in lanes (a relay pass: each job's rows in order, each after the ack of the one
before, the jobs side by side). Shared by both paths of ``relay.py``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from shared.aio import raise_if_cancelling
from shared.bus.protocol import Bus
from shared.metrics import EVENTS_PUBLISHED, OUTBOX_LAG, event_type_of
from shared.telemetry import send_span

log = logging.getLogger(__name__)

# What an operator reads when NATS does not acknowledge: nats-server answers nothing at
# all to a publish its JetStream store could not write, so the client sees only a timeout.
NOT_STORED_HINT = (
    "NATS is unreachable, or JetStream could not store the message: a full disk under its "
    "store_dir says 'no space left on device' in nats-server's log"
)


@dataclass(frozen=True)
class Outgoing:
    """One row to publish: ``key`` is what its stamp names (the row id from a claim, the
    event id when published on commit, whose insert returned no id)."""

    key: int | str
    event_id: str
    subject: str
    payload: bytes
    headers: dict[str, str]
    age_s: float


async def publish_in_order(bus: Bus, rows: Sequence[Outgoing]) -> list[int | str]:
    """Publish rows in order, stopping at the first failure; the keys of those sent."""
    sent, failure = await _publish_lane(bus, rows)
    if failure is not None:
        _say_unsent([failure], len(sent), len(rows))
    return sent


async def publish_each_in_order(bus: Bus, lanes: Sequence[Sequence[Outgoing]]) -> list[int | str]:
    """Publish several lanes side by side, each in order and stopping at its first
    failure; the keys of the rows acknowledged.

    A relay pass's lanes are its jobs (rows of one aggregate): a row is sent only once
    the one before it in its lane was stored, so a publish lost amid a pass (NATS
    reconnecting) can never let a job's later event be stored before it, while the pass
    as a whole costs about one ack round trip per row of its busiest job instead of one
    per row. (A pass that awaited every ack in turn published no faster than one row a
    round trip: the launcher's relay, which publishes every node's events, became a
    serial stage of its own.) Every lane has ended when this returns or raises, so no
    publish of the pass outlives the partition lock its caller holds."""
    outcomes = await asyncio.gather(*(_publish_lane(bus, lane) for lane in lanes), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    finished = [outcome for outcome in outcomes if not isinstance(outcome, BaseException)]
    sent = [key for keys, _ in finished for key in keys]
    failures = [failure for _, failure in finished if failure is not None]
    if failures:
        _say_unsent(failures, len(sent), sum(len(lane) for lane in lanes))
    return sent


def _say_unsent(failures: Sequence[tuple[Outgoing, Exception]], sent: int, rows: int) -> None:
    row, exc = failures[0]
    others = f" nor the events of {len(failures) - 1} other jobs" if len(failures) > 1 else ""
    log.warning(
        "outbox: NATS did not take %s (%r)%s; %d of %d rows published, the rest stay unsent "
        "and are retried. %s",
        row.subject,
        exc,
        others,
        sent,
        rows,
        NOT_STORED_HINT,
    )


async def _publish_lane(
    bus: Bus, rows: Sequence[Outgoing]
) -> tuple[list[int | str], tuple[Outgoing, Exception] | None]:
    """One lane of ``publish_each_in_order``: the keys sent, and the first failure."""
    sent: list[int | str] = []
    for row in rows:
        try:
            with send_span(row.subject, row.event_id, row.headers) as headers:
                await bus.publish(row.subject, row.payload, msg_id=row.event_id, headers=headers)
        except Exception as exc:
            raise_if_cancelling()
            log.debug("the failed publish of %s", row.event_id, exc_info=True)
            return sent, (row, exc)
        sent.append(row.key)
        EVENTS_PUBLISHED.labels(event_type_of(row.subject)).inc()
        OUTBOX_LAG.observe(row.age_s)
    return sent, None


async def publish_pipelined(bus: Bus, rows: Sequence[Outgoing], window: int = 128) -> list[int | str]:
    """Publish rows up to ``window`` at a time without waiting for each one's ack before
    sending the next (they leave in order on the one connection); the keys of those acked.

    For the rows published on commit: a burst (a thousand submits in a second) published
    one ack at a time would leave rows a second old, which every relay's poll would then
    take."""
    if len(rows) == 1:
        return await publish_in_order(bus, rows)
    sent: list[int | str] = []
    for start in range(0, len(rows), window):
        chunk = rows[start : start + window]
        acked = await asyncio.gather(*(_publish_one(bus, row) for row in chunk))
        sent.extend(row.key for row, ok in zip(chunk, acked, strict=True) if ok)
        if not all(acked):
            refused = next(row for row, ok in zip(chunk, acked, strict=True) if not ok)
            log.warning(
                "outbox: NATS did not take %s; %d of %d events published on commit, the rest are "
                "left to the relay passes. %s",
                refused.subject,
                len(sent),
                len(rows),
                NOT_STORED_HINT,
            )
            break
    return sent


async def _publish_one(bus: Bus, row: Outgoing) -> bool:
    try:
        with send_span(row.subject, row.event_id, row.headers) as headers:
            await bus.publish(row.subject, row.payload, msg_id=row.event_id, headers=headers)
    except Exception:
        raise_if_cancelling()
        log.debug("outbox publish of %s failed", row.event_id, exc_info=True)
        return False
    EVENTS_PUBLISHED.labels(event_type_of(row.subject)).inc()
    OUTBOX_LAG.observe(row.age_s)
    return True
