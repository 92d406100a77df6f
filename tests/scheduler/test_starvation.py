"""The starvation limit follows the load: the typical queueing delay of finished jobs, a
time-weighted moving average, on its own and as the live cycle reads it from Postgres."""

from __future__ import annotations

import math
import time

import pytest

from services.scheduler.repository import finished_waits
from services.scheduler.starvation import StarvationRule, TypicalWait
from shared.db.pool import Database
from tests.launcher import attempts

HOUR = 3600.0


def test_the_limit_is_a_multiple_of_the_typical_wait_and_never_below_its_floor() -> None:
    rule = StarvationRule(min_wait_s=12 * HOUR, factor=12, window_s=7 * 24 * HOUR)
    assert rule.limit(0.0) == 12 * HOUR  # an idle cluster: the floor
    assert rule.limit(2 * HOUR) == 24 * HOUR  # a loaded one: 12x its typical wait


def test_the_typical_wait_is_a_time_weighted_average_of_finished_jobs_waits() -> None:
    typical = TypicalWait(time_constant_s=100)
    assert typical.value == 0.0
    typical.finished(10, 40.0)
    assert typical.value == 40.0  # the first finished job's wait
    typical.finished(10 + 100 * math.log(2), 80.0)  # one half-life later: halfway
    assert typical.value == pytest.approx(60.0)
    typical.finished(10 + 100 * math.log(2), 1060.0)  # at the same instant: still a little
    assert typical.value == pytest.approx(61.0)


async def test_the_live_cycle_reads_the_queueing_delay_of_finished_jobs(db: Database) -> None:
    await attempts.known_nodes(db, "n1")
    first, second = await attempts.assigned(db, "n1", instances=2, state="EXITED")
    # Submitted 3 hours ago, finished now; its two one-GPU tasks ran 30 minutes each: it
    # waited 2.5 hours (its waits before and between its runs).
    await db.execute(
        "UPDATE api.jobs SET created_at = now() - interval '3 hours', finished_at = now(),"
        " state = 'SUCCEEDED'"
    )
    for attempt in (first, second):
        await db.execute(
            "UPDATE launcher.attempts SET started_at = now() - interval '1 hour',"
            " finished_at = now() - interval '30 minutes' WHERE id = $1",
            attempt,
        )
    async with db.transaction() as conn:
        [(finished_s, waited_s)] = await finished_waits(conn, time.time() - HOUR)
        assert waited_s == pytest.approx(2.5 * HOUR, abs=5)
        assert finished_s == pytest.approx(time.time(), abs=60)
        assert await finished_waits(conn, finished_s) == []  # folded in already
