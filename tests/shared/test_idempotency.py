"""Idempotent consumers' records, against real Postgres: a second delivery is not new;
a rolled-back handler leaves the event to process again; records past the longest
stream's retention are deleted in batches, the younger ones kept."""

from __future__ import annotations

import pytest

from shared.bus.streams import ALERTS
from shared.db.pool import Database
from shared.idempotency import REMEMBER_S, first_time, forget_processed


async def test_an_event_is_new_once_per_consumer(db: Database) -> None:
    async with db.transaction() as conn:
        assert await first_time(conn, "launcher", "evt-1")
        assert not await first_time(conn, "launcher", "evt-1")  # a redelivery
        assert await first_time(conn, "alerter", "evt-1")  # another consumer's record


async def test_a_rolled_back_handler_leaves_the_event_to_process_again(db: Database) -> None:
    class Abort(Exception):
        pass

    async def handle_then_fail() -> None:
        async with db.transaction() as conn:
            assert await first_time(conn, "launcher", "evt-1")
            raise Abort

    with pytest.raises(Abort):
        await handle_then_fail()
    async with db.transaction() as conn:
        assert await first_time(conn, "launcher", "evt-1")


async def test_records_are_kept_as_long_as_a_stream_keeps_a_message_then_deleted_in_batches(
    db: Database,
) -> None:
    assert ALERTS.max_age_s == REMEMBER_S  # the longest-lived stream: 30 days
    for n, age_days in enumerate((45, 40, 35, 31, 29, 1)):
        await db.execute(
            "INSERT INTO corral.processed_events (consumer, event_id, processed_at)"
            " VALUES ('launcher', $1, now() - make_interval(days => $2))",
            f"evt-{n}",
            age_days,
        )
    assert await forget_processed(db, batch=3) == 4
    left = await db.fetch("SELECT event_id FROM corral.processed_events ORDER BY event_id")
    assert [r["event_id"] for r in left] == ["evt-4", "evt-5"]
    assert await forget_processed(db) == 0
