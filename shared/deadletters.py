"""Dead letters in Postgres: what a consumer gave up on, and why."""

from __future__ import annotations

from shared.bus.protocol import Delivery
from shared.db.pool import Database


class PostgresDeadLetters:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def record(self, consumer: str, delivery: Delivery, reason: str) -> None:
        async with self._db.transaction() as conn:
            await conn.execute(
                """INSERT INTO corral.dead_letters
                       (consumer, subject, stream_seq, reason, payload, headers)
                   VALUES ($1, $2, $3, $4, $5, $6)""",
                consumer,
                delivery.subject,
                delivery.stream_seq,
                reason[:4000],
                delivery.data,
                delivery.headers,
            )
