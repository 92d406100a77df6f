"""Condition rules against real Postgres: a job pending too long, a job idling on its GPUs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.alerter.conditions import reconcile_conditions
from services.alerter.routing import Routing
from services.alerter.rule_config import AlertRules, ConditionRules, IdleRule, PendingRule
from services.api.repository import ApiRepository
from shared.db.pool import Database
from shared.jobs import JobSpec

RULES = AlertRules(
    conditions=ConditionRules(
        job_pending_too_long=PendingRule(severity="warning", after_s=600, runbook="https://runbooks/pending"),
        gpu_idle=IdleRule(severity="warning", below_pct=5, for_s=600),
    )
)


async def submit(db: Database, gpus: int = 2) -> str:
    spec = JobSpec.model_validate(
        {"name": "train", "tasks": [{"name": "main", "command": "x", "resources": {"gpus": gpus}}]}
    )
    job = await ApiRepository(db).submit_job(spec, "alice")
    return str(job["id"])


async def reconcile(db: Database) -> tuple[list[str], list[str]]:
    async with db.transaction() as conn:
        return await reconcile_conditions(conn, RULES, Routing())


async def open_alerts(db: Database) -> list[tuple[str, str, str]]:
    rows = await db.fetch("SELECT rule, summary, state FROM alerter.alerts ORDER BY started_at")
    return [(r["rule"], r["summary"], r["state"]) for r in rows]


async def test_a_job_pending_too_long_raises_an_alert_until_it_is_placed(db: Database) -> None:
    waiting = await submit(db)
    await submit(db)  # recent: fine
    await db.execute("UPDATE api.jobs SET updated_at = now() - interval '75 minutes' WHERE id = $1", waiting)
    opened, _ = await reconcile(db)
    assert len(opened) == 1
    assert await reconcile(db) == ([], [])  # one alert per job, not one per check
    ((rule, summary, state),) = await open_alerts(db)
    assert (rule, state) == ("JobPendingTooLong", "firing")
    assert f"job {waiting} (train) has been pending for 1h15m waiting for 2 GPU(s)" == summary
    annotations = await db.fetchval("SELECT annotations FROM alerter.alerts")
    assert annotations == {"runbook_url": "https://runbooks/pending"}
    await db.execute("UPDATE api.jobs SET state = 'SCHEDULED' WHERE id = $1", waiting)
    _, resolved = await reconcile(db)
    assert len(resolved) == 1
    assert (await open_alerts(db))[0][2] == "resolved"


async def _running_attempt(db: Database, job_id: str, started_minutes_ago: int) -> None:
    await db.execute(
        "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no, node_id,"
        " gpu_indices, state, started_at) VALUES ($1, $2, 1, 'main', 0, 1, 'n1', '{0,1}', 'RUNNING',"
        " now() - make_interval(mins => $3))",
        f"att-{job_id}",
        job_id,
        started_minutes_ago,
    )


async def _history(db: Database, utilization: float, minutes: int = 11) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    for gpu in (0, 1):
        for k in range(minutes * 6):
            await db.execute(
                "INSERT INTO monitor.gpu_history (resolution_s, bucket, node_id, gpu_index, samples,"
                " utilization_avg, utilization_max) VALUES (10, $1, 'n1', $2, 10, $3, $3)"
                " ON CONFLICT (resolution_s, node_id, gpu_index, bucket) DO UPDATE SET utilization_max = $3",
                now - timedelta(seconds=10 * k),
                gpu,
                utilization,
            )


async def test_a_running_job_idle_on_its_gpus_raises_an_alert_that_ends_when_it_works(db: Database) -> None:
    job_id = await submit(db)
    await db.execute("UPDATE api.jobs SET state = 'RUNNING' WHERE id = $1", job_id)
    await _running_attempt(db, job_id, started_minutes_ago=30)
    await _history(db, utilization=1.0)
    opened, _ = await reconcile(db)
    assert len(opened) == 1
    ((rule, summary, _),) = await open_alerts(db)
    assert rule == "GpuIdle"
    assert f"job {job_id} holds 2 GPU(s) under 5% utilisation for 10m" in summary
    await _history(db, utilization=60.0, minutes=1)  # it started working
    _, resolved = await reconcile(db)
    assert len(resolved) == 1


async def test_no_history_no_verdict(db: Database) -> None:
    job_id = await submit(db)
    await db.execute("UPDATE api.jobs SET state = 'RUNNING' WHERE id = $1", job_id)
    await _running_attempt(db, job_id, started_minutes_ago=30)
    await _history(db, utilization=0.0, minutes=3)  # 3 of 10 minutes seen: not enough
    assert await reconcile(db) == ([], [])
