"""Idempotent consumers: remember which events were acted on, in the same transaction.

``first_time(conn, consumer, event_id)`` inserts the (consumer, event) pair and says
whether it is new. Call it first inside the handler's transaction: on a redelivery it
returns False and the handler does nothing; if the handler's transaction rolls back,
the record rolls back with it, so the event will be processed again.

The records are kept as long as the longest-lived stream keeps a message (``REMEMBER_S``:
after that no redelivery and no replay can bring the event back); ``forget_processed``,
run hourly by each service that records them, deletes the older ones.
"""

from __future__ import annotations

from shared.bus.streams import STREAMS
from shared.db.pool import Connection, Database

# How long a processed event is remembered: as long as any stream keeps a message.
REMEMBER_S = max(spec.max_age_s for spec in STREAMS)
# How often a service that records them deletes the records past ``REMEMBER_S``.
FORGET_EVERY_S = 3600.0


async def first_time(conn: Connection, consumer: str, event_id: str) -> bool:
    inserted = await conn.fetchval(
        """INSERT INTO corral.processed_events (consumer, event_id) VALUES ($1, $2)
           ON CONFLICT DO NOTHING RETURNING true""",
        consumer,
        event_id,
    )
    return bool(inserted)


async def forget_processed(db: Database, older_than_s: float = REMEMBER_S, batch: int = 10_000) -> int:
    """Delete the records older than ``older_than_s``, a batch per statement; how many went."""
    return await db.delete_in_batches(
        """DELETE FROM corral.processed_events WHERE ctid = ANY (ARRAY(
               SELECT ctid FROM corral.processed_events
               WHERE processed_at < now() - make_interval(secs => $1) LIMIT $2))""",
        older_than_s,
        batch=batch,
    )
