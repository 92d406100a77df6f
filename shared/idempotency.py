"""Idempotent consumers: remember which events were acted on, in the same transaction.

``first_time(conn, consumer, event_id)`` inserts the (consumer, event) pair and says
whether it is new. Call it first inside the handler's transaction: on a redelivery it
returns False and the handler does nothing; if the handler's transaction rolls back,
the record rolls back with it, so the event will be processed again.
"""

from __future__ import annotations

from shared.db.pool import Connection


async def first_time(conn: Connection, consumer: str, event_id: str) -> bool:
    inserted = await conn.fetchval(
        """INSERT INTO corral.processed_events (consumer, event_id) VALUES ($1, $2)
           ON CONFLICT DO NOTHING RETURNING true""",
        consumer,
        event_id,
    )
    return bool(inserted)
