"""Writing events into the outbox, in the caller's transaction or in the change's own
statement, and handing them to this process's relay to publish once committed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

import asyncpg

from shared.db.pool import Connection, Database, after_commit, has_commit_scope
from shared.events.envelope import Envelope
from shared.outbox.relay import OutboxRelay
from shared.outbox.rows import INSERT, OutboxRow, notify_channel, outbox_row

# How long after its commit an event published on commit has left, but for NATS trouble
# (then the relays' poll, a second later, takes it): a writer acting on state it read
# from Postgres younger than this passes ``follows_others`` to ``append``.
PUBLISHED_WITHIN_S = 2.0


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
    relay = None if follows_others else relay_on_commit(conn)
    if relay is not None:
        await conn.execute(INSERT, *row)
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
    await conn.executemany(INSERT, rows)
    relay = relay_on_commit(conn)
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


async def append_with_change(
    conn: Connection, change: str, args: Sequence[Any], event: Envelope, *, aggregate: str
) -> asyncpg.Record | None:
    """``append`` with the change it records, in one statement, in the caller's open
    transaction: ``change`` is one data-modifying statement that RETURNs a row when it
    changed something, and ``event`` is written only if it did. The change's row, or
    None. One round trip where ``execute`` then ``append`` would take two; the event is
    published on commit as ``append``'s is, or else NOTIFYs the relays."""
    if not conn.is_in_transaction():
        raise RuntimeError("outbox.append_with_change must run inside a transaction")
    row = outbox_row(event, aggregate)
    relay = relay_on_commit(conn)
    channel = None if relay is not None else notify_channel(event.source)
    result = await conn.fetchrow(change_with_event_statement(change, None, len(args)), *args, *row, channel)
    if result is not None and relay is not None:
        after_commit(conn, partial(relay.publish_committed, [row]))
    return result


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


@contextlib.contextmanager
def following_others() -> Iterator[None]:
    """Within this block (and the tasks started in it), every event goes through a relay
    pass instead of on commit, as with ``append``'s ``follows_others``: for writers that
    act on what another process committed moments ago. The launcher decides a job the
    moment a node agent records an attempt's end; the agent's ``task.exited`` reaches the
    stream through a relay pass, and the job's ``job.succeeded``, in the same partition,
    goes out after it instead of overtaking it."""
    token = _RELAY.set(None)
    try:
        yield
    finally:
        _RELAY.reset(token)


def relay_on_commit(conn: Connection) -> OutboxRelay | None:
    """The relay that will publish what ``conn``'s transaction appends once it commits,
    if there is one (a running relay in this context, a ``commit_scope`` around it).

    For a statement of that transaction that writes outbox rows itself (the scheduler's
    placements): with a relay, hand it the rows, ``after_commit(conn,
    partial(relay.publish_committed, rows))``; without, the statement must NOTIFY."""
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


@dataclass(frozen=True)
class Consequence:
    """A second change that follows from the first in ``change_with_event``'s statement:
    ``sql`` is one data-modifying statement that reads the first change's row from the
    CTE ``changed`` (e.g. ``UPDATE ... FROM changed ...``) and RETURNs a row when it
    changed something; ``event`` is written then, and only then, after the first's."""

    sql: str
    event: Envelope


async def change_with_event(
    db: Database,
    change: str,
    args: Sequence[Any],
    event: Envelope,
    *,
    aggregate: str,
    then: Consequence | None = None,
) -> asyncpg.Record | None:
    """Run ``change`` — one data-modifying statement that RETURNs a row when it changed
    something — and, only if it did, add ``event`` to the outbox: both in one statement,
    so atomic without a transaction's BEGIN and COMMIT (two of the four round trips of a
    change and its event). The change's row, or None when it changed nothing (and no
    event was written). The events are published on commit by this process's relay, as
    ``append``'s are, or else NOTIFY the relays.

    ``then``: a consequence of the change in the same statement, with its own event
    (the agent's "task started" also makes its job RUNNING). The returned row then
    also holds the consequence's columns (NULLs when it changed nothing) and
    ``consequence_rows``, how many rows it changed."""
    rows = [outbox_row(event, aggregate)]
    if then is not None:
        rows.append(outbox_row(then.event, aggregate))
    channel = statement_notify_channel(event.source)
    statement = change_with_event_statement(change, then.sql if then else None, len(args))
    params = [value for row in rows for value in row]
    result = await db.fetchrow(statement, *args, *params, channel)
    if result is not None and channel is None:
        followed = then is not None and result["consequence_rows"] > 0
        committed_by_statement(rows if followed else rows[:1])
    return result


@lru_cache(maxsize=64)
def change_with_event_statement(change: str, consequence: str | None, n: int) -> str:
    """``change_with_event``'s statement, for a change taking ``n`` parameters: then six
    per event (an outbox row's values), then the NOTIFY channel (NULL: none).

    One SELECT per event, each from (at most one row of) the change it follows; the
    ORDER BY gives them ids, hence publishing order, in that order. Only the caller's own
    statements (SQL text from a .sql file, never input) and parameter numbers are
    formatted in; every value is a parameter."""
    sources = ["changed"] if consequence is None else ["changed", "consequence"]
    selects = " UNION ALL ".join(
        f"SELECT {i} AS n, ${n + 6 * i + 1}::text AS event_id, ${n + 6 * i + 2}::text AS subject,"  # noqa: S608
        f" ${n + 6 * i + 3}::text AS aggregate, ${n + 6 * i + 4}::smallint AS part,"
        f" ${n + 6 * i + 5}::bytea AS payload, ${n + 6 * i + 6}::jsonb AS headers"
        f" FROM (SELECT FROM {source} LIMIT 1) AS {source}_row"
        for i, source in enumerate(sources)
    )
    channel = n + 6 * len(sources) + 1
    if consequence is None:
        also, columns, joined = "", "changed.*", "changed"
    else:
        also = f"consequence AS ({consequence.strip().rstrip(';')}),"
        columns = "changed.*, consequence.*, (SELECT count(*) FROM consequence) AS consequence_rows"
        joined = "changed LEFT JOIN consequence ON true"
    return f"""
        WITH changed AS ({change.strip().rstrip(";")}), {also}
        event AS (
            INSERT INTO corral.outbox (event_id, subject, aggregate, part, payload, headers)
            SELECT e.event_id, e.subject, e.aggregate, e.part, e.payload, e.headers
            FROM ({selects}) AS e ORDER BY e.n
            RETURNING part)
        SELECT {columns} FROM {joined},
            (SELECT count(pg_notify(${channel}, part::text)) FROM event
             WHERE ${channel}::text IS NOT NULL) AS notified"""  # noqa: S608
