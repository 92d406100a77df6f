"""The starvation limit follows the load: the typical first-start wait over a window, on
its own and as the live cycle reads it from Postgres."""

from __future__ import annotations

import pytest

from services.scheduler.repository import typical_wait
from services.scheduler.starvation import StarvationRule, TypicalWait
from shared.db.pool import Database
from tests.launcher import attempts

HOUR = 3600.0


def test_the_limit_is_a_multiple_of_the_typical_wait_and_never_below_its_floor() -> None:
    rule = StarvationRule(min_wait_s=12 * HOUR, factor=12, window_s=7 * 24 * HOUR)
    assert rule.limit(0.0) == 12 * HOUR  # an idle cluster: the floor
    assert rule.limit(2 * HOUR) == 24 * HOUR  # a loaded one: 12x its typical wait


def test_the_typical_wait_forgets_what_left_the_window() -> None:
    typical = TypicalWait(window_s=100)
    assert typical.value(0) == 0.0
    typical.started(10, 4.0)
    typical.started(50, 8.0)
    assert typical.value(60) == 6.0
    assert typical.value(120) == 8.0  # the first start (at 10) is out of the window
    assert typical.value(200) == 0.0


async def test_the_live_cycle_reads_the_typical_wait_of_first_starts(db: Database) -> None:
    await attempts.known_nodes(db, "n1")
    first, second = await attempts.assigned(db, "n1", instances=2, state="EXITED")
    # The job was submitted 3 hours ago; its two attempts started 1 hour ago and, as a
    # retry, 10 minutes ago: its first start came after a 2-hour wait.
    await db.execute("UPDATE api.jobs SET created_at = now() - interval '3 hours'")
    await db.execute(
        "UPDATE launcher.attempts SET started_at = now() - interval '1 hour' WHERE id = $1", first
    )
    await db.execute(
        "UPDATE launcher.attempts SET started_at = now() - interval '10 minutes' WHERE id = $1", second
    )
    async with db.transaction() as conn:
        assert await typical_wait(conn, 7 * 24 * HOUR) == pytest.approx(2 * HOUR, abs=5)
        assert await typical_wait(conn, 30 * 60) == 0.0  # first started before the window
