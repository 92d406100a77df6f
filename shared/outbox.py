"""The transactional outbox and its relay.

``append`` writes an event into ``corral.outbox`` on the caller's connection, inside
the caller's transaction, so the state change and its event commit or vanish together.
It also ``NOTIFY``s the relays, which Postgres delivers only on commit; the payload names
the row's partition, so the relay that hears it goes straight there. Every poll interval
a relay counts every partition's unsent rows and relays the partitions that hold one a
poll interval old (its NOTIFY was missed, or its relay is gone): not the rows in flight.

The relay publishes committed rows to JetStream with ``Nats-Msg-Id = event id`` and
stamps ``sent_at`` only after the publish ack. Ordering: rows carry a partition number
derived from their aggregate (usually the job id). A relay takes a partition with a
session advisory lock, then reads that partition's unsent rows in id order, publishes
them one after another, stopping at the first failure, and lets the lock go only once
their stamp has committed. So any number of relays (one per service process) share the
work, while the events of one job reach the stream in the order they were committed. A
crash between publish and stamp re-publishes the row; JetStream's duplicate window
drops it, and consumers are idempotent beyond that window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Sequence
from typing import Any

from shared.aio import raise_if_cancelling, wait_event
from shared.bus.protocol import Bus
from shared.db.pool import DATABASE_ERRORS, Connection, Database
from shared.events.envelope import Envelope
from shared.metrics import (
    EVENTS_PUBLISHED,
    OUTBOX_LAG,
    OUTBOX_OLDEST_UNSENT,
    OUTBOX_UNSENT,
    event_type_of,
)
from shared.telemetry import current_traceparent, send_span

log = logging.getLogger(__name__)

PARTITIONS = 16
# Class id of the partition advisory locks (the second key is the partition number).
_RELAY_LOCK_CLASS = 0x0C0A

# A relay pass's claim (``OutboxRelay._relay_partition``), once the partition's session
# lock is ours: its unsent rows in id order or, if there are none, the lock let go at
# once (the CASE evaluates the unlock only then; the CTE is evaluated once). The lock is
# taken by a statement of its own before: a statement's snapshot predates what it
# executes, so a claim that also took the lock could read rows that the relay which held
# it had stamped, committed and let go of in the meantime, and publish them again.
_CLAIM = """
    WITH claimed AS MATERIALIZED (
        SELECT id, event_id, subject, payload, headers,
               extract(epoch FROM clock_timestamp() - created_at) AS age_s
        FROM corral.outbox
        WHERE part = $1 AND sent_at IS NULL
        ORDER BY id LIMIT $2)
    SELECT c.*,
           CASE WHEN NOT EXISTS (SELECT 1 FROM claimed) THEN pg_advisory_unlock($3, $1) END AS let_go
    FROM (VALUES (1)) AS one LEFT JOIN claimed AS c ON true"""


def _stamp_and_unlock(sent: Sequence[int], part: int) -> str:
    """One simple-protocol round trip: stamp the published rows, commit, *then* give the
    partition's lock back (released before the commit, another relay could read the
    rows as unsent and publish them again). Only integers are formatted in."""
    ids = ",".join(str(int(row_id)) for row_id in sent)
    unlock = f"SELECT pg_advisory_unlock({_RELAY_LOCK_CLASS}, {int(part)})"
    if not ids:
        return unlock
    stamp = f"UPDATE corral.outbox SET sent_at = now() WHERE id = ANY('{{{ids}}}'::bigint[])"  # noqa: S608
    return f"BEGIN; {stamp}; COMMIT; {unlock}"


def partition_of(aggregate: str) -> int:
    return zlib.crc32(aggregate.encode()) % PARTITIONS


def notify_channel(source: str) -> str:
    """The NOTIFY channel of one event source (``corral/api`` → ``corral_outbox_api``).

    Each service's relay wakes only for its own service's writes, so five relays do not
    all race for every row; they still share every partition, and each polls anyway.
    """
    return "corral_outbox_" + source.rsplit("/", 1)[-1]


OutboxRow = tuple[str, str, str, int, bytes, dict[str, str]]


def outbox_row(event: Envelope, aggregate: str) -> OutboxRow:
    """The values of ``event``'s outbox row, in the order of the table's columns
    (event_id, subject, aggregate, part, payload, headers), stamped with the current
    trace unless it carries one.

    For ``append`` and ``append_many``, and for a statement that writes a state change
    and its event at once (the API's submit: ``services/api/sql/jobs.sql``), which must
    also ``pg_notify(notify_channel(event.source), part::text)``: the relay that hears
    it publishes that partition without first counting every partition's rows."""
    traceparent = event.traceparent or current_traceparent()
    if traceparent and event.traceparent is None:
        event = event.model_copy(update={"traceparent": traceparent})
    headers = {"traceparent": traceparent} if traceparent else {}
    return (
        event.id,
        event.nats_subject,
        aggregate,
        partition_of(aggregate),
        event.model_dump_json().encode(),
        headers,
    )


async def append(conn: Connection, event: Envelope, *, aggregate: str) -> None:
    """Add ``event`` to the outbox in the caller's open transaction."""
    if not conn.is_in_transaction():
        raise RuntimeError("outbox.append must run inside the transaction of the state change")
    # The row and its NOTIFY (naming its partition) in one statement: one round trip.
    await conn.execute(
        """WITH added AS (
               INSERT INTO corral.outbox (event_id, subject, aggregate, part, payload, headers)
               VALUES ($1, $2, $3, $4, $5, $6) RETURNING part)
           SELECT pg_notify($7, part::text) FROM added""",
        *outbox_row(event, aggregate),
        notify_channel(event.source),
    )


async def append_many(conn: Connection, events: Sequence[tuple[Envelope, str]]) -> None:
    """``append`` for many (event, aggregate) pairs: one statement, one notification."""
    if not events:
        return
    if not conn.is_in_transaction():
        raise RuntimeError("outbox.append_many must run inside the transaction of the state change")
    rows = [outbox_row(event, aggregate) for event, aggregate in events]
    await conn.executemany(
        """INSERT INTO corral.outbox (event_id, subject, aggregate, part, payload, headers)
           VALUES ($1, $2, $3, $4, $5, $6)""",
        rows,
    )
    parts_by_source: dict[str, set[int]] = {}
    for row, (event, _) in zip(rows, events, strict=True):
        parts_by_source.setdefault(event.source, set()).add(row[3])
    for source, parts in parts_by_source.items():
        await conn.execute(
            "SELECT pg_notify($1, part::text) FROM unnest($2::int[]) AS part",
            notify_channel(source),
            sorted(parts),
        )


class OutboxRelay:
    """Publishes committed outbox rows; run one per service process (see module doc)."""

    def __init__(
        self,
        db: Database,
        bus: Bus,
        *,
        source: str = "corral/any",
        batch_size: int = 256,
        poll_interval_s: float = 1.0,
        retention_s: float = 24 * 3600,
    ) -> None:
        self._db = db
        self._bus = bus
        self._batch_size = batch_size
        self._poll_interval_s = poll_interval_s
        self._retention_s = retention_s
        self._wakeup = asyncio.Event()
        self._channel = notify_channel(source)
        self._notified: set[int] = set()  # partitions a NOTIFY named since the last pass
        self._unnamed = False  # a NOTIFY named none since the last pass
        self.published = 0

    async def run(self) -> None:
        """Relay forever: wake on NOTIFY, and poll anyway in case a NOTIFY was missed.

        The listening connection comes from the pool (``async with``, so it goes back
        even if we are cancelled while acquiring it) and stops listening before it does.
        """
        while True:
            try:
                async with self._db.connection() as listener:
                    await listener.add_listener(self._channel, self._on_notify)
                    try:
                        await self._relay_forever()
                    finally:
                        with contextlib.suppress(*DATABASE_ERRORS):
                            await listener.remove_listener(self._channel, self._on_notify)
            except DATABASE_ERRORS as exc:
                # Postgres restarting: the rows wait in the outbox; listen again once it is back.
                raise_if_cancelling()
                log.warning(
                    "outbox relay lost the database (%s); retrying in %.0fs", exc, self._poll_interval_s
                )
                await asyncio.sleep(self._poll_interval_s)

    async def _relay_forever(self) -> None:
        cleanup_due = poll_due = 0.0
        first = True
        while True:
            self._wakeup.clear()
            notified, self._notified = self._notified, set()
            unnamed, self._unnamed = self._unnamed, False
            now = asyncio.get_running_loop().time()
            if unnamed or now >= poll_due:
                # The full pass, which also sets the gauges: every partition for a NOTIFY
                # that named none (and at start); on the poll, only partitions holding a
                # row nobody relayed within a poll interval (a NOTIFY missed, its relay
                # gone). Not the rows in flight: under load there always are some, each
                # being relayed by the relay its NOTIFY woke, and taking them on every
                # poll set every relay in the cluster contending for the same partitions.
                await self.relay_pending(min_age_s=0.0 if unnamed or first else self._poll_interval_s)
                first = False
                if now >= poll_due:
                    poll_due = now + self._poll_interval_s
            if notified:
                await self._relay_notified(notified)
            if now >= cleanup_due:
                await self._delete_old_sent_rows()
                cleanup_due = now + 600
            # A partition another relay held when a NOTIFY named it: that relay publishes
            # only what it had claimed, so look again soon, not a poll interval later.
            await wait_event(self._wakeup, 0.01 if self._notified else self._poll_interval_s)

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        if isinstance(payload, str) and payload.isdigit():
            self._notified.add(int(payload))
        else:
            self._unnamed = True  # a NOTIFY that names no partition: the next pass counts
        self._wakeup.set()

    async def _relay_notified(self, parts: set[int]) -> None:
        """Publish the partitions NOTIFY named, without counting every partition first
        (a round trip per wake-up that a pass with a partition to go to does not need)."""
        for part in sorted(parts):
            sent = await self._relay_partition(part)
            if sent is None:
                self._notified.add(part)  # another relay holds it: this one, again shortly
            elif sent == self._batch_size:
                self._notified.add(part)  # more than a batch waits: go round again
                self._wakeup.set()

    async def relay_pending(self, min_age_s: float = 0.0) -> int:
        """Publish every unsent row now (only partitions holding one at least
        ``min_age_s`` old, when given); returns how many were published."""
        total = 0
        while True:
            rows = await self._db.fetch(
                """SELECT part, count(*) AS unsent,
                          extract(epoch FROM clock_timestamp() - min(created_at)) AS oldest_s
                   FROM corral.outbox WHERE sent_at IS NULL GROUP BY part"""
            )
            OUTBOX_UNSENT.set(sum(row["unsent"] for row in rows))
            OUTBOX_OLDEST_UNSENT.set(max((float(row["oldest_s"]) for row in rows), default=0.0))
            due = [row for row in rows if float(row["oldest_s"]) >= min_age_s]
            if not due:
                return total
            results = [await self._relay_partition(row["part"]) for row in due]
            published = sum(r for r in results if r is not None)
            total += published
            if published == 0:
                # Nothing went out: either every partition with work is held by another
                # relay (which publishes it), or publishing fails (NATS away: back off).
                return total
            if all(r is None or r < self._batch_size for r in results):
                # Every partition we got was emptied. Rows committed since then sent a
                # NOTIFY that wakes the loop again, so counting once more (a query per
                # wake-up, most of them finding nothing) would only repeat that.
                left = max(0, sum(row["unsent"] for row in rows) - published)
                OUTBOX_UNSENT.set(left)
                if not left:
                    OUTBOX_OLDEST_UNSENT.set(0.0)
                return total

    async def _relay_partition(self, part: int) -> int | None:
        """Publish a partition's rows in order; None when another relay holds it.

        Three round trips per pass, not four (``BEGIN``, claim, stamp, ``COMMIT``), and
        no row locks: the partition's lock is a *session* advisory lock, taken first
        (``_CLAIM`` says why apart), given back by the statement that stamps the rows,
        after their commit (``_stamp_and_unlock``). While a relay holds it, no other
        relay reads the partition, so a row is published once and in order. (The rows'
        ``FOR UPDATE`` locks, which the transaction-scoped lock needed, wrote every row
        one more time.) "Held by another relay" (look at it again soon) and "nothing
        left" (done, and the claim has let the lock go) differ: under load most NOTIFYs
        name a partition this relay has just emptied, and taking those for contention
        had cost a counting pass each. Any way out of here but the
        stamp's commit (a failed claim or stamp, a cancellation while publishing)
        closes the connection, which is what lets the lock go then: a pooled connection
        must never keep it.
        """
        async with self._db.connection() as conn:
            let_go = False
            try:
                if not await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", _RELAY_LOCK_CLASS, part):
                    let_go = True  # another relay holds the partition
                    return None
                rows = await conn.fetch(_CLAIM, part, self._batch_size, _RELAY_LOCK_CLASS)
                rows = [row for row in rows if row["id"] is not None]
                if not rows:
                    let_go = True  # nothing left; the claim gave the lock back itself
                    return 0
                sent = await self._publish(rows)
                await conn.execute(_stamp_and_unlock(sent, part))
                let_go = True
            finally:
                if not let_go:
                    # A failed claim or stamp, a cancellation: a session lock outlives
                    # a rolled-back statement, and only closing the session surely ends it.
                    conn.terminate()
            self.published += len(sent)
            return len(sent)

    async def _publish(self, rows: Sequence[Any]) -> list[int]:
        """Publish claimed rows in order, stopping at the first failure; the ids sent."""
        sent: list[int] = []
        try:
            for row in rows:
                with send_span(row["subject"], row["event_id"], dict(row["headers"])) as headers:
                    await self._bus.publish(
                        row["subject"], bytes(row["payload"]), msg_id=row["event_id"], headers=headers
                    )
                sent.append(row["id"])
                EVENTS_PUBLISHED.labels(event_type_of(row["subject"])).inc()
                OUTBOX_LAG.observe(float(row["age_s"]))
        except Exception:
            raise_if_cancelling()
            # Keep order: stop at the first failure, stamp what got through, retry later.
            log.warning("outbox publish failed; %d of %d sent", len(sent), len(rows), exc_info=True)
        return sent

    async def _delete_old_sent_rows(self) -> None:
        await self._db.fetch(
            "DELETE FROM corral.outbox WHERE sent_at < now() - make_interval(secs => $1) RETURNING id",
            self._retention_s,
        )
