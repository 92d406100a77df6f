"""The outbox relay: publishes what its process commits as it commits it, and relays
what that missed partition by partition (the package's docstring says how and why)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from shared.aio import raise_if_cancelling, wait_event
from shared.bus.protocol import Bus
from shared.db.pool import DATABASE_ERRORS, Database
from shared.metrics import OUTBOX_OLDEST_UNSENT, OUTBOX_UNSENT
from shared.outbox.rows import (
    ALL_PARTITIONS,
    OutboxRow,
    may_precede,
    notify_channel,
    partitions_of,
    sources_published_with,
)
from shared.outbox.sending import Outgoing, publish_each_in_order, publish_pipelined

log = logging.getLogger(__name__)

# How long after publishing a row on commit it is stamped sent: the stamps of all rows
# published meanwhile go in one statement (under load, one per a dozen events instead of
# one each). Well under the relays' poll interval, after which a row unsent is theirs.
STAMP_AFTER_S = 0.05
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
        SELECT id, event_id, subject, aggregate, payload, headers,
               extract(epoch FROM clock_timestamp() - created_at) AS age_s
        FROM corral.outbox
        WHERE part = $1 AND sent_at IS NULL
        ORDER BY id LIMIT $2)
    SELECT c.*,
           CASE WHEN NOT EXISTS (SELECT 1 FROM claimed) THEN pg_advisory_unlock($3, $1) END AS let_go
    FROM (VALUES (1)) AS one LEFT JOIN claimed AS c ON true"""


# Unsent rows of other publishers that a pass publishes before its own (``may_precede``):
# those of the claimed rows' aggregates, older than the last claimed, of the subjects named.
_PRECEDING = """
    SELECT id, event_id, subject, aggregate, payload, headers,
           extract(epoch FROM clock_timestamp() - created_at) AS age_s
    FROM corral.outbox
    WHERE sent_at IS NULL AND aggregate = ANY($1::text[]) AND id < $2 AND NOT part = ANY($3::int[])
      AND subject LIKE ANY($4::text[])
    ORDER BY id"""


def _outgoing(row: Any) -> Outgoing:
    return Outgoing(
        row["id"],
        row["event_id"],
        row["subject"],
        bytes(row["payload"]),
        dict(row["headers"]),
        float(row["age_s"]),
    )


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


class OutboxRelay:
    """Publishes committed outbox rows; run one per service process (see module doc).

    It publishes the rows of ``source`` and of the sources its publisher relays for
    (``rows.PUBLISHERS``), and only those: a service's bus identity may publish nothing
    else. ``corral/any`` (tools, tests) publishes every row.

    ``answers``: the partitions whose NOTIFYs this relay answers at once (all of them by
    default). Several processes of one service split them (the launchers: their
    ``shards.py``), so a row committed elsewhere (a node agent's) wakes one relay, not
    every one of them to contend for it. The poll still takes any partition's rows that
    nobody relayed within a poll interval, so a process that is down delays its share
    by up to two poll intervals and loses none.
    """

    def __init__(
        self,
        db: Database,
        bus: Bus,
        *,
        source: str = "corral/any",
        batch_size: int = 256,
        poll_interval_s: float = 1.0,
        retention_s: float = 24 * 3600,
        answers: Callable[[int], bool] = lambda _part: True,
    ) -> None:
        self._db = db
        self._answers = answers
        self._bus = bus
        self._batch_size = batch_size
        self._poll_interval_s = poll_interval_s
        self._retention_s = retention_s
        self._wakeup = asyncio.Event()
        sources = sources_published_with(source)
        self._precede_with = [f"{prefix}.%" for prefix in may_precede(source)]  # (LIKE patterns)
        self._channels = [notify_channel(s) for s in sources]
        self._parts = list(ALL_PARTITIONS if source == "corral/any" else partitions_of(sources))
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
            Outgoing(row[0], row[0], row[1], row[4], row[5], now - committed_at)
            for row, committed_at in batch
        ]
        sent = await publish_pipelined(self._bus, outgoing)
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
                    for channel in self._channels:
                        await listener.add_listener(channel, self._on_notify)
                    try:
                        await self._relay_forever()
                    finally:
                        with contextlib.suppress(*DATABASE_ERRORS):
                            for channel in self._channels:
                                await listener.remove_listener(channel, self._on_notify)
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
            part = int(payload)
            if not self._answers(part):
                return  # another process's to answer (or this one's poll, if it is down)
            self._notified.add(part)
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
                   FROM corral.outbox WHERE sent_at IS NULL AND part = ANY($1::int[]) GROUP BY part""",
                self._parts,
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
        relay reads the partition, so a row is published once and in order. (A
        transaction-scoped lock would need the rows' ``FOR UPDATE`` locks as well, which
        write every row one more time.) "Held by another relay" (look at it again soon)
        and "nothing left" (done, and the claim has let the lock go) differ: under load
        most NOTIFYs name a partition this relay has just emptied, and taking those for
        contention would cost a counting pass each. Any way out of here but the
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
                own = {row["id"] for row in rows}
                if self._precede_with:
                    preceding = await conn.fetch(
                        _PRECEDING,
                        list({row["aggregate"] for row in rows}),
                        rows[-1]["id"],
                        self._parts,
                        self._precede_with,
                    )
                    rows = sorted([*rows, *preceding], key=lambda row: int(row["id"]))
                # Each job's rows in order, one after another's ack; the jobs side by side.
                lanes: dict[str, list[Outgoing]] = {}
                for row in rows:
                    lanes.setdefault(row["aggregate"], []).append(_outgoing(row))
                published = await publish_each_in_order(self._bus, list(lanes.values()))
                # (Another publisher's rows published first are its relay's to stamp.)
                sent = [int(key) for key in published if key in own]
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
