"""Condition rules against real Postgres: a job pending too long, a job idling on its GPUs,
a virtual cluster that gets nothing, a service that went silent."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

from services.alerter.conditions import reconcile_conditions
from services.alerter.routing import Routing
from services.api.cluster.repository import ClusterRepository
from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from shared.alert_rules import (
    AlertRules,
    ConditionRules,
    IdleRule,
    PendingRule,
    ServiceDownRule,
    StarvedRule,
)
from shared.db.pool import Database
from shared.jobs import JobSpec
from shared.liveness import Liveness

RULES = AlertRules(
    conditions=ConditionRules(
        job_pending_too_long=PendingRule(
            severity="warning",
            after_s=600,
            runbook="https://runbooks/pending",
            labels={"team": "ml-infra", "job": "not-this"},
            annotations={"dashboard": "https://grafana/queue"},
        ),
        gpu_idle=IdleRule(severity="warning", below_pct=5, for_s=600),
        vc_starved=StarvedRule(enabled=False),
        service_down=ServiceDownRule(enabled=False),
    )
)


async def submit(db: Database, gpus: int = 2, vc: str = "default") -> str:
    spec = JobSpec.model_validate(
        {
            "name": "train",
            "virtual_cluster": vc,
            "tasks": [{"name": "main", "command": "x", "resources": {"gpus": gpus}}],
        }
    )
    await ClusterRepository(db).put_vc(vc, "", {}, None, "test")  # jobs go to VCs that exist
    submitted = await Submitter(JobRepository(db)).submit(spec, "alice", None)
    return submitted.job.id


async def reconcile(db: Database, rules: AlertRules = RULES) -> tuple[list[str], list[str]]:
    async with db.transaction() as conn:
        return await reconcile_conditions(conn, rules, Routing())


async def open_alerts(db: Database) -> list[tuple[str, str, str]]:
    rows = await db.fetch("SELECT rule, summary, state FROM alerter.alerts ORDER BY started_at")
    return [(r["rule"], r["summary"], r["state"]) for r in rows]


async def test_a_pending_job_alert_gives_the_schedulers_reason(db: Database) -> None:
    job_id = await submit(db, gpus=16)
    await db.execute("UPDATE api.jobs SET updated_at = now() - interval '2 hours' WHERE id = $1", job_id)
    await db.execute(
        "INSERT INTO scheduler.pending_status (job_id, reason, detail) VALUES"
        " ($1, 'GangDoesNotFit', 'a task needs 16 GPUs on one node; the largest ready node has 8')",
        job_id,
    )
    await db.execute(
        "INSERT INTO scheduler.queue_order (job_ids) VALUES (ARRAY[$1])"
        " ON CONFLICT (only_row) DO UPDATE SET job_ids = excluded.job_ids",
        job_id,
    )
    await reconcile(db)
    ((_, summary, _),) = await open_alerts(db)
    assert summary.endswith(
        "waiting for 16 GPU(s): GangDoesNotFit: a task needs 16 GPUs on one node;"
        " the largest ready node has 8 (position 1 in the queue)"
    )
    labels = await db.fetchval("SELECT labels FROM alerter.alerts")
    assert labels["reason"] == "GangDoesNotFit"


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
    labels, annotations = (await db.fetch("SELECT labels, annotations FROM alerter.alerts"))[0]
    assert annotations == {"runbook_url": "https://runbooks/pending", "dashboard": "https://grafana/queue"}
    assert labels == {"team": "ml-infra", "job": waiting, "user": "alice", "virtual_cluster": "default"}
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


async def test_a_virtual_cluster_whose_jobs_wait_while_none_starts_is_starved(db: Database) -> None:
    rules = AlertRules(
        conditions=ConditionRules(
            job_pending_too_long=PendingRule(enabled=False),
            gpu_idle=IdleRule(enabled=False),
            vc_starved=StarvedRule(after_s=1800, labels={"team": "capacity"}),
            service_down=ServiceDownRule(enabled=False),
        )
    )
    vision = [await submit(db, gpus=4, vc="vision") for _ in range(2)]
    nlp = await submit(db, vc="nlp")
    started = await submit(db, vc="nlp")
    await db.execute("UPDATE api.jobs SET updated_at = now() - interval '40 minutes'")
    # One nlp job was placed 5 minutes ago: nlp is served, merely busy.
    await db.execute(
        "INSERT INTO scheduler.allocations (job_id, generation, task_role, task_index, node_id, gpu_indices,"
        " created_at) VALUES ($1, 1, 'main', 0, 'n1', '{0,1}', now() - interval '5 minutes')",
        started,
    )
    await db.execute("UPDATE api.jobs SET state = 'RUNNING' WHERE id = $1", started)
    opened, _ = await reconcile(db, rules)
    assert len(opened) == 1
    ((rule, summary, _),) = await open_alerts(db)
    assert rule == "VcStarved"
    assert summary == (
        "virtual cluster vision: 2 job(s) wanting 8 GPU(s) pending, the oldest for 40m,"
        " and none of its jobs started in 30m"
    )
    labels = await db.fetchval("SELECT labels FROM alerter.alerts")
    assert labels == {"team": "capacity", "virtual_cluster": "vision"}
    assert nlp  # pending too, but its cluster got a job started: not starved
    await db.execute(
        "INSERT INTO scheduler.allocations (job_id, generation, task_role, task_index, node_id, gpu_indices)"
        " VALUES ($1, 1, 'main', 0, 'n2', '{0,1,2,3}')",
        vision[0],
    )
    _, resolved = await reconcile(db, rules)
    assert len(resolved) == 1


async def test_a_service_none_of_whose_instances_is_heard_is_down(db: Database) -> None:
    rules = AlertRules(
        conditions=ConditionRules(
            job_pending_too_long=PendingRule(enabled=False),
            gpu_idle=IdleRule(enabled=False),
            vc_starved=StarvedRule(enabled=False),
            service_down=ServiceDownRule(after_s=30),
        )
    )
    instances = [
        ("scheduler@a:1", "scheduler", 120),  # crashed two minutes ago; its standby too:
        ("scheduler@b:2", "scheduler", 95),
        ("monitor@a:3", "monitor", 300),  # one monitor died, another runs: fine
        ("monitor@b:4", "monitor", 2),
        ("agent-n1@c:5", "agent-n1", 600),  # node agents: NodeUnreachable's business
    ]
    for instance, service, silent_s in instances:
        await db.execute(
            "INSERT INTO corral.service_instances (instance_id, service, hostname, pid, last_seen_at)"
            " VALUES ($1, $2, 'h', 1, now() - make_interval(secs => $3))",
            instance,
            service,
            silent_s,
        )
    opened, _ = await reconcile(db, rules)
    assert len(opened) == 1
    ((rule, summary, _),) = await open_alerts(db)
    assert (rule, summary) == (
        "ServiceDown",
        "service scheduler is down: none of its 2 instance(s) on record was heard for 1m",
    )
    severity, labels = (await db.fetch("SELECT severity, labels FROM alerter.alerts"))[0]
    assert (severity, labels) == ("critical", {"service": "scheduler"})
    liveness = Liveness(db, "scheduler", interval_s=0.05)  # a scheduler comes back
    beating = asyncio.create_task(liveness.run())
    await asyncio.sleep(0.2)
    _, resolved = await reconcile(db, rules)
    assert len(resolved) == 1
    beating.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await beating
    # A clean stop removes its own row: a deliberate shutdown pages nobody.
    assert not await db.fetchval(
        "SELECT count(*) FROM corral.service_instances WHERE instance_id = $1", liveness.instance_id
    )
