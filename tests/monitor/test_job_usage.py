"""Each job's daily GPU usage, folded from the coarse GPU history on a real Postgres: every
final bucket counted exactly once however often the upkeep runs, the buckets still being
recomputed left for later, days split at UTC midnight."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.monitor.repository import prune_job_usage, roll_up_job_usage
from shared.db.pool import Database

COARSE_S = 300


async def _bucket(db: Database, at: datetime, gpu: int, job: str | None, samples: int, util: float) -> None:
    await db.execute(
        "INSERT INTO monitor.gpu_history (resolution_s, bucket, node_id, gpu_index, job_id, samples,"
        " utilization_avg) VALUES ($1, $2, 'n1', $3, $4, $5, $6)",
        COARSE_S,
        at,
        gpu,
        job,
        samples,
        util,
    )


async def _fold(db: Database) -> None:
    async with db.transaction() as conn:
        await roll_up_job_usage(conn, COARSE_S)


async def _daily(db: Database) -> dict[tuple[str, str], tuple[int, float]]:
    rows = await db.fetch("SELECT day, job_id, samples, utilization_sum FROM monitor.job_gpu_usage_daily")
    return {(r["day"].isoformat(), r["job_id"]): (r["samples"], r["utilization_sum"]) for r in rows}


def _start_of_bucket(at: datetime) -> datetime:
    return datetime.fromtimestamp(int(at.timestamp()) // COARSE_S * COARSE_S, UTC)


async def test_final_buckets_are_folded_once_and_recent_ones_wait(db: Database) -> None:
    now = _start_of_bucket(datetime.now(UTC))
    old = now - timedelta(hours=2)
    await _bucket(db, old, 0, "job-a", 30, 50.0)
    await _bucket(db, old, 1, "job-a", 30, 10.0)
    await _bucket(db, old + timedelta(minutes=5), 0, "job-b", 20, 100.0)
    await _bucket(db, old, 2, None, 30, 99.0)  # no job: nobody's usage
    await _bucket(db, now - timedelta(minutes=5), 0, "job-a", 30, 70.0)  # still recomputed
    await _fold(db)
    day_a, day_b = old.date().isoformat(), (old + timedelta(minutes=5)).date().isoformat()
    assert await _daily(db) == {(day_a, "job-a"): (60, 30 * 50.0 + 30 * 10.0), (day_b, "job-b"): (20, 2000.0)}
    await _fold(db)  # the upkeep runs every minute: nothing is counted twice
    assert (await _daily(db))[(day_a, "job-a")] == (60, 1800.0)
    mark = await db.fetchval("SELECT folded_until FROM monitor.job_gpu_usage_mark")
    assert mark == now - timedelta(seconds=3 * COARSE_S)


async def test_a_job_running_across_midnight_has_a_row_for_each_day(db: Database) -> None:
    # Yesterday's midnight: both buckets are final whatever the time now.
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
    await _bucket(db, midnight - timedelta(minutes=5), 0, "job-night", 30, 40.0)
    await _bucket(db, midnight, 0, "job-night", 30, 80.0)
    await _fold(db)
    daily = await _daily(db)
    before, after = (midnight - timedelta(days=1)).date().isoformat(), midnight.date().isoformat()
    assert daily[(before, "job-night")] == (30, 1200.0)
    assert daily[(after, "job-night")] == (30, 2400.0)


async def test_old_days_are_pruned(db: Database) -> None:
    today = datetime.now(UTC).date()
    for days_ago, job in ((500, "job-old"), (1, "job-new")):
        await db.execute(
            "INSERT INTO monitor.job_gpu_usage_daily VALUES ($1, $2, 1, 1.0)",
            today - timedelta(days=days_ago),
            job,
        )
    async with db.transaction() as conn:
        await prune_job_usage(conn, 400 * 86_400.0)
    assert set(await _daily(db)) == {((today - timedelta(days=1)).isoformat(), "job-new")}
