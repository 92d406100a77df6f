"""A task over its share of a GPU raises GpuOverLimit for the job's owner, once, with its
runbook: the alerter's handler on real Postgres."""

from __future__ import annotations

from pathlib import Path

from services.alerter.handlers import TASK_EVENTS, AlerterHandlers
from services.alerter.routing import RoutingFile
from services.alerter.rule_config import RulesInForce
from services.alerter.rules import ONE_SHOT_RULES
from shared.db.pool import Database
from shared.events import TaskOverLimit
from shared.events.jobs import TaskOverLimitData
from tests.launcher import attempts

BASE = "http://corral.test/docs/runbooks/"


def over_limit(job_id: str, attempt_id: str, action: str = "killed") -> TaskOverLimit:
    data = TaskOverLimitData.model_validate(
        {
            "attempt_id": attempt_id,
            "job_id": job_id,
            "node_id": "gpu-7",
            "gpu_index": 3,
            "used_mb": 50000,
            "limit_mb": 40779,
            "action": action,
        }
    )
    return TaskOverLimit(source="corral/agent", subject=attempt_id, data=data)


async def test_the_owner_is_told_once_with_what_it_used_and_what_became_of_it(
    db: Database, tmp_path: Path
) -> None:
    [attempt_id] = await attempts.assigned(db, "gpu-7", instances=1, state="RUNNING")
    job_id = await db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", attempt_id)
    routing = tmp_path / "routing.yaml"
    routing.write_text(
        "receivers:\n  - {name: owners, webhook: {url: 'http://127.0.0.1:9/owners'}}\n"
        "route: {receiver: owners}\n"
    )
    rules = RulesInForce(None, BASE)
    handlers = AlerterHandlers(db, RoutingFile(routing), rules)
    event = over_limit(job_id, attempt_id)
    await handlers.handle(event)
    await handlers.handle(event)  # a redelivery
    await handlers.handle(over_limit(job_id, attempt_id))  # told again: still one alert
    [alert] = await db.fetch("SELECT rule, fingerprint, severity, summary, labels FROM alerter.alerts")
    assert (alert["rule"], alert["fingerprint"], alert["severity"]) == (
        "GpuOverLimit",
        f"GpuOverLimit/{attempt_id}",
        "warning",
    )
    assert alert["summary"] == (
        f"job {job_id}: a task used 50000 MiB of GPU 3 on node gpu-7, over its share of 40779 MiB;"
        " its node stopped it"
    )
    assert alert["labels"] == {
        "job": job_id,
        "node": "gpu-7",
        "gpu": "3",
        "action": "killed",
        "user": "alice",
        "virtual_cluster": "default",
    }
    assert "GpuOverLimit" in ONE_SHOT_RULES  # a thing that happened: never repeated
    assert rules.current.events.gpu_over_limit.runbook == f"{BASE}gpu-over-limit"


def test_the_alerter_reads_these_events_with_a_consumer_of_their_own() -> None:
    assert TASK_EVENTS.filter_subjects == ("corral.task.over_limit.>",)
    assert TASK_EVENTS.durable == "alerter-tasks"
