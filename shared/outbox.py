"""The transactional outbox and its relay.

``append`` writes an event into ``corral.outbox`` on the caller's connection, inside
the caller's transaction, so the state change and its event commit or vanish together.

In a service, the process that commits the row publishes it too, at once: ``append``
hands the event to the process's relay through ``after_commit`` (shared/db/pool.py), and
the relay publishes it as soon as the transaction has committed, then stamps it sent
(``OutboxRelay.publish_committed``). That is most of a job's events, each a hop of its
life (submitted → scheduled → assigned → started → ...), and it saves each the wait for
a NOTIFY and three round trips of a relay pass. Should that publish fail (NATS away) or
the process die first, the row is still in the outbox, unsent, and the relays' poll
publishes it.

Without a relay in the context (tests, tools) or a ``commit_scope`` around the
transaction, ``append`` ``NOTIFY``s the relays instead, which Postgres delivers only on
commit; the payload names the row's partition, so the relay that hears it goes straight
there. Every poll interval a relay counts every partition's unsent rows and relays the
partitions that hold one a poll interval old (its NOTIFY was missed, its relay is gone,
or its publish on commit failed): not the rows in flight.

The relay publishes committed rows to JetStream with ``Nats-Msg-Id = event id`` and
stamps ``sent_at`` only after the publish ack. Ordering: rows carry a partition number
derived from their aggregate (usually the job id). A relay takes a partition with a
session advisory lock, then reads that partition's unsent rows in id order, publishes
them one after another, stopping at the first failure, and lets the lock go only once
their stamp has committed. So any number of relays (one per service process) share the
work, while the events of one job reach the stream in the order they were committed. A
crash between publish and stamp re-publishes the row; JetStream's duplicate window
drops it, and consumers are idempotent beyond that window.

Ordering with publishing on commit: a process publishes what it commits in commit order
(sent in that order on its one NATS connection, acks awaited together). Events of one
job that different processes commit are ordered by the job's life itself (the launcher
writes ``job.running`` only after it has consumed ``task.started``), except where a
writer acts on what it read from Postgres: the scheduler may place a job whose
``job.submitted`` is still on its way, so it passes ``follows_others`` for a job that
became pending moments ago, and that event goes through a relay pass, after the job's
unsent ones. While a process's publishes fail, its relay stops publishing on commit for
a while and NOTIFYs instead, so rows left unsent go out in partition order with the
ones after them (a failure amid a burst may still let a later event of the same job go
first). Consumers must (and do) bear reordering anyway (DESIGN.md, rule 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import zlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import Any

import asyncpg

from shared.aio import raise_if_cancelling, wait_event
from shared.bus.protocol import Bus
from shared.db.pool import DATABASE_ERRORS, Connection, Database, after_commit, has_commit_scope
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
# How long after publishing a row on commit it is stamped sent: the stamps of all rows
# published meanwhile go in one statement (under load, one per a dozen events instead of
# one each). Well under the relays' poll interval, after which a row unsent is theirs.
STAMP_AFTER_S = 0.05
# How long after its commit an event published on commit has left, but for NATS trouble
# (then the relays' poll, a second later, takes it): a writer acting on state it read
# from Postgres younger than this passes ``follows_others`` to ``append``.
PUBLISHED_WITHIN_S = 2.0
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


_INSERT = """INSERT INTO corral.outbox (event_id, subject, aggregate, part, payload, headers)
             VALUES ($1, $2, $3, $4, $5, $6)"""


async def append(conn: Connection, event: Envelope, *, aggregate: str, follows_others: bool = False) -> None:
    """Add ``event`` to the outbox in the caller's open transaction (not inside a
    savepoint that may roll back alone: the event would be published all the same).

    ``follows_others``: the event may follow one of the same aggregate that another
    process committed moments ago and may not have published yet (the scheduler placing
    a job it read from Postgres, whose ``job.submitted`` may still be on its way). It
    then goes through a relay pass, which publishes the partition's unsent rows in id
    order, that one included, instead of on commit (see ``PUBLISHED_WITHIN_S``)."""
    if not conn.is_in_transaction():
        raise RuntimeError("outbox.append must run inside the transaction of the state change")
    row = outbox_row(event, aggregate)
    relay = None if follows_others else _relay_on_commit(conn)
    if relay is not None:
        await conn.execute(_INSERT, *row)
        # Registered once the row is in: a caller that swallowed a failed insert would
        # otherwise publish an event its (aborted) transaction never wrote.
        after_commit(conn, partial(relay.publish_committed, [row]))
        return
    # The row and its NOTIFY (naming its partition) in one statement: one round trip.
    await conn.execute(
        """WITH added AS (
               INSERT INTO corral.outbox (event_id, subject, aggregate, part, payload, headers)
               VALUES ($1, $2, $3, $4, $5, $6) RETURNING part)
           SELECT pg_notify($7, part::text) FROM added""",
        *row,
        notify_channel(event.source),
    )


async def append_many(conn: Connection, events: Sequence[tuple[Envelope, str]]) -> None:
    """``append`` for many (event, aggregate) pairs: one statement, one notification."""
    if not events:
        return
    if not conn.is_in_transaction():
        raise RuntimeError("outbox.append_many must run inside the transaction of the state change")
    rows = [outbox_row(event, aggregate) for event, aggregate in events]
    await conn.executemany(_INSERT, rows)
    relay = _relay_on_commit(conn)
    if relay is not None:
        after_commit(conn, partial(relay.publish_committed, rows))
        return
    parts_by_source: dict[str, set[int]] = {}
    for row, (event, _) in zip(rows, events, strict=True):
        parts_by_source.setdefault(event.source, set()).add(row[3])
    for source, parts in parts_by_source.items():
        await conn.execute(
            "SELECT pg_notify($1, part::text) FROM unnest($2::int[]) AS part",
            notify_channel(source),
            sorted(parts),
        )


# This process's relay, which publishes the events its transactions commit (set by
# ``shared.service`` for a service's lifetime; unset, ``append`` NOTIFYs the relays).
_RELAY: ContextVar[OutboxRelay | None] = ContextVar("corral_outbox_relay", default=None)


@contextlib.contextmanager
def publishing_on_commit(relay: OutboxRelay) -> Iterator[None]:
    """Within this block (and the tasks started in it), ``relay`` publishes the events
    of each transaction as soon as it commits; the relay must be running."""
    token = _RELAY.set(relay)
    try:
        yield
    finally:
        _RELAY.reset(token)


def _relay_on_commit(conn: Connection) -> OutboxRelay | None:
    """The relay that will publish what ``conn``'s transaction appends once it commits,
    if there is one (a running relay in this context, a ``commit_scope`` around it)."""
    relay = _RELAY.get()
    if relay is None or not relay.publishing_on_commit or not has_commit_scope(conn):
        return None
    return relay


def statement_notify_channel(source: str) -> str | None:
    """For a statement that writes an outbox row on its own (committed when it returns):
    the channel to NOTIFY, or None when this process publishes the row itself, which
    ``committed_by_statement`` then hands it to."""
    relay = _RELAY.get()
    return None if relay is not None and relay.publishing_on_commit else notify_channel(source)


def committed_by_statement(rows: list[OutboxRow]) -> None:
    """Publish rows a statement has committed (see ``statement_notify_channel``)."""
    relay = _RELAY.get()
    if relay is not None:
        relay.publish_committed(rows)


async def change_with_event(
    db: Database, change: str, args: Sequence[Any], event: Envelope, *, aggregate: str
) -> asyncpg.Record | None:
    """Run ``change`` — one data-modifying statement that RETURNs a row when it changed
    something — and, only if it did, add ``event`` to the outbox: both in one statement,
    so atomic without a transaction's BEGIN and COMMIT (two of the four round trips of a
    change and its event). The change's row, or None when it changed nothing (and no
    event was written). The event is published on commit by this process's relay, as
    ``append``'s are, or else NOTIFYs the relays."""
    n = len(args)
    change = change.strip().rstrip(";")
    row = outbox_row(event, aggregate)
    channel = statement_notify_channel(event.source)
    # Only the caller's own statement (SQL text from a .sql file, never input) and
    # parameter numbers are formatted in; every value is a parameter.
    statement = f"""
        WITH changed AS ({change}),
        event AS (
            INSERT INTO corral.outbox (event_id, subject, aggregate, part, payload, headers)
            SELECT ${n + 1}, ${n + 2}, ${n + 3}, ${n + 4}, ${n + 5}, ${n + 6} FROM changed LIMIT 1
            RETURNING part)
        SELECT changed.* FROM changed,
            (SELECT count(pg_notify(${n + 7}, part::text)) FROM event
             WHERE ${n + 7}::text IS NOT NULL) AS notified"""  # noqa: S608
    result = await db.fetchrow(statement, *args, *row, channel)
    if result is not None and channel is None:
        committed_by_statement([row])
    return result


@dataclass(frozen=True)
class _Outgoing:
    """One row to publish: ``key`` is what its stamp names (the row id from a claim, the
    event id when published on commit, whose insert returned no id)."""

    key: int | str
    event_id: str
    subject: str
    payload: bytes
    headers: dict[str, str]
    age_s: float


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
        # Publishing on commit: rows committed and not yet published, in commit order;
        # rows published and not yet stamped; whether it is on (``run`` turns it on, a
        # failed publish off for a while).
        self._committed: list[tuple[OutboxRow, float]] = []
        self._committed_ready = asyncio.Event()
        self._unstamped: list[str] = []
        self.publishing_on_commit = False

    async def run(self) -> None:
        """Relay forever, and publish what this process commits as it commits it."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._relay_notified_and_polled(), name="outbox-relay-poll")
            tg.create_task(self._publish_committed_forever(), name="outbox-publish-on-commit")

    def publish_committed(self, rows: Sequence[OutboxRow]) -> None:
        """Publish rows their transaction has just committed (``after_commit`` calls it),
        after those handed over before; left to the poll while publishing on commit is off."""
        if not self.publishing_on_commit:
            return
        now = asyncio.get_running_loop().time()
        self._committed.extend((row, now) for row in rows)
        self._committed_ready.set()

    async def _publish_committed_forever(self) -> None:
        """Publish committed rows in the order they came; stamp them sent a little later,
        in one statement for all published meanwhile (``STAMP_AFTER_S``). A failed
        publish turns publishing on commit off for two poll intervals: the rows not
        published (and those committed meanwhile, which NOTIFY instead) go out through
        the partitions' relay passes, in order, once NATS is back."""
        loop = asyncio.get_running_loop()
        stamp_at = math.inf
        self.publishing_on_commit = True
        while True:
            if not self._committed:  # (else: handed over while the last round published)
                if stamp_at == math.inf:
                    await self._committed_ready.wait()
                else:
                    await wait_event(self._committed_ready, max(0.0, stamp_at - loop.time()))
            self._committed_ready.clear()
            if self._committed:
                await self._publish_committed_rows()
                if self._unstamped and stamp_at == math.inf:
                    stamp_at = loop.time() + STAMP_AFTER_S
            if self._unstamped and loop.time() >= stamp_at:
                if await self._stamp_published_on_commit():
                    stamp_at = math.inf
                else:
                    stamp_at = loop.time() + self._poll_interval_s

    async def _publish_committed_rows(self) -> None:
        batch, self._committed = self._committed, []
        now = asyncio.get_running_loop().time()
        outgoing = [
            _Outgoing(row[0], row[0], row[1], row[4], row[5], now - committed_at)
            for row, committed_at in batch
        ]
        sent = await _publish_pipelined(self._bus, outgoing)
        self.published += len(sent)
        self._unstamped.extend(str(key) for key in sent)
        if len(sent) < len(outgoing):
            self.publishing_on_commit = False
            self._committed.clear()  # (unsent: the relays' passes take them)
            await asyncio.sleep(2 * self._poll_interval_s)
            self.publishing_on_commit = True

    async def _stamp_published_on_commit(self) -> bool:
        """Stamp what was published on commit; on failure keep the ids for a later try
        (meanwhile a relay's poll may publish those rows again: JetStream's duplicate
        window drops the copy)."""
        try:
            await self._db.execute(
                "UPDATE corral.outbox SET sent_at = now() WHERE event_id = ANY($1::text[])", self._unstamped
            )
        except DATABASE_ERRORS as exc:
            raise_if_cancelling()
            log.warning("could not stamp %d published outbox rows (%s); retrying", len(self._unstamped), exc)
            del self._unstamped[:-100_000]  # beyond those, the relays' poll sends them again
            return False
        self._unstamped = []
        return True

    async def _relay_notified_and_polled(self) -> None:
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
                outgoing = [
                    _Outgoing(
                        row["id"],
                        row["event_id"],
                        row["subject"],
                        bytes(row["payload"]),
                        dict(row["headers"]),
                        float(row["age_s"]),
                    )
                    for row in rows
                ]
                sent = [int(key) for key in await _publish(self._bus, outgoing)]
                await conn.execute(_stamp_and_unlock(sent, part))
                let_go = True
            finally:
                if not let_go:
                    # A failed claim or stamp, a cancellation: a session lock outlives
                    # a rolled-back statement, and only closing the session surely ends it.
                    conn.terminate()
            self.published += len(sent)
            return len(sent)

    async def _delete_old_sent_rows(self) -> None:
        await self._db.fetch(
            "DELETE FROM corral.outbox WHERE sent_at < now() - make_interval(secs => $1) RETURNING id",
            self._retention_s,
        )


async def _publish(bus: Bus, rows: Sequence[_Outgoing]) -> list[int | str]:
    """Publish rows in order, stopping at the first failure; the keys of those sent."""
    sent: list[int | str] = []
    try:
        for row in rows:
            with send_span(row.subject, row.event_id, row.headers) as headers:
                await bus.publish(row.subject, row.payload, msg_id=row.event_id, headers=headers)
            sent.append(row.key)
            EVENTS_PUBLISHED.labels(event_type_of(row.subject)).inc()
            OUTBOX_LAG.observe(row.age_s)
    except Exception:
        raise_if_cancelling()
        # Keep order: stop at the first failure, stamp what got through, retry later.
        log.warning("outbox publish failed; %d of %d sent", len(sent), len(rows), exc_info=True)
    return sent


async def _publish_pipelined(bus: Bus, rows: Sequence[_Outgoing], window: int = 128) -> list[int | str]:
    """Publish rows up to ``window`` at a time without waiting for each one's ack before
    sending the next (they leave in order on the one connection); the keys of those acked.

    For the rows published on commit: a burst (a thousand submits in a second) published
    one ack at a time had left rows a second old, which every relay's poll then took."""
    if len(rows) == 1:
        return await _publish(bus, rows)
    sent: list[int | str] = []
    for start in range(0, len(rows), window):
        chunk = rows[start : start + window]
        acked = await asyncio.gather(*(_publish_one(bus, row) for row in chunk))
        sent.extend(row.key for row, ok in zip(chunk, acked, strict=True) if ok)
        if not all(acked):
            log.warning("outbox publish failed; %d of %d sent", len(sent), len(rows))
            break
    return sent


async def _publish_one(bus: Bus, row: _Outgoing) -> bool:
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
