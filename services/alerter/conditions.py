"""The condition rules, checked against the cluster's state every few seconds.

They are reconciled: each check computes the alerts that should be open now; new ones are opened
(one per fingerprint), and open ones whose condition ended are resolved by the alerter.
"""

from __future__ import annotations

from pathlib import Path

from services.alerter.routing import Routing
from services.alerter.rule_config import AlertRules, EventRule
from services.alerter.rules import AlertDraft
from shared.db.pool import Connection
from shared.db.queries import Queries

SQL = Queries(Path(__file__).parent / "sql")
CONDITION_RULES = ("JobPendingTooLong", "GpuIdle")


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"


def _annotations(rule: EventRule) -> dict[str, str]:
    return {"runbook_url": rule.runbook} if rule.runbook else {}


async def current_conditions(conn: Connection, rules: AlertRules) -> list[AlertDraft]:
    """The condition alerts that should be open right now."""
    drafts = []
    pending = rules.conditions.job_pending_too_long
    if pending.enabled:
        for row in await conn.fetch(SQL.jobs_pending_longer_than, pending.after_s):
            drafts.append(
                AlertDraft(
                    rule="JobPendingTooLong",
                    fingerprint=f"JobPendingTooLong/{row['id']}",
                    severity=pending.severity,
                    summary=f"job {row['id']} ({row['name']}) has been pending for {_duration(row['age_s'])}"
                    f" waiting for {row['total_gpus']} GPU(s)",
                    labels={
                        "job": row["id"],
                        "user": row["username"],
                        "virtual_cluster": row["virtual_cluster"],
                    },
                    annotations=_annotations(pending),
                )
            )
    idle = rules.conditions.gpu_idle
    if idle.enabled:
        for row in await conn.fetch(SQL.idle_jobs, idle.for_s, idle.below_pct):
            drafts.append(
                AlertDraft(
                    rule="GpuIdle",
                    fingerprint=f"GpuIdle/{row['job_id']}",
                    severity=idle.severity,
                    summary=f"job {row['job_id']} holds {row['gpus']} GPU(s) under {idle.below_pct:g}% "
                    f"utilisation for {_duration(idle.for_s)} (at most {row['util_max']:.0f}%)",
                    labels={"job": row["job_id"], "node": row["node_id"]},
                    annotations=_annotations(idle),
                )
            )
    return drafts


async def reconcile_conditions(
    conn: Connection, rules: AlertRules, routing: Routing
) -> tuple[list[str], list[str]]:
    """Open the condition alerts that hold and resolve those that ended: (opened, resolved)."""
    from services.alerter.repository import open_alert, resolve

    drafts = await current_conditions(conn, rules)
    opened = [alert_id for d in drafts if (alert_id := await open_alert(conn, d, routing)) is not None]
    holding = {d.fingerprint for d in drafts}
    resolved = []
    for row in await conn.fetch(SQL.open_condition_alerts, list(CONDITION_RULES)):
        if row["fingerprint"] not in holding and await resolve(
            conn, row["id"], "alerter", "the condition no longer holds", routing
        ):
            resolved.append(row["id"])
    return opened, resolved
