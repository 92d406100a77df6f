"""The condition rules, checked against the cluster's state every few seconds.

They are reconciled: each check computes the alerts that should be open now; new ones are opened
(one per fingerprint), and open ones whose condition ended are resolved by the alerter.
"""

from __future__ import annotations

from services.alerter import repository
from services.alerter.alert_lifecycle import open_alert, resolve
from services.alerter.routing import Routing
from services.alerter.rules import AlertDraft, drafted
from shared.alert_rules import AlertRules
from shared.db.pool import Connection

CONDITION_RULES = ("JobPendingTooLong", "GpuIdle", "VcStarved", "ServiceDown")


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes == 0:
        return f"{seconds:.0f}s"
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"


async def current_conditions(conn: Connection, rules: AlertRules) -> list[AlertDraft]:
    """The condition alerts that should be open right now."""
    drafts = []
    pending = rules.conditions.job_pending_too_long
    if pending.enabled:
        for row in await repository.jobs_pending_longer_than(conn, pending.after_s):
            summary = (
                f"job {row['id']} ({row['name']}) has been pending for {_duration(row['age_s'])}"
                f" waiting for {row['total_gpus']} GPU(s)"
            )
            labels = {"job": row["id"], "user": row["username"], "virtual_cluster": row["virtual_cluster"]}
            if row["reason"]:  # the scheduler's word on why (so routes can tell capacity from health)
                summary += f": {row['reason']}: {row['detail']} (position {row['position']} in the queue)"
                labels["reason"] = row["reason"]
            drafts.append(
                drafted(pending, "JobPendingTooLong", f"JobPendingTooLong/{row['id']}", summary, labels)
            )
    idle = rules.conditions.gpu_idle
    if idle.enabled:
        for row in await repository.idle_jobs(conn, idle.for_s, idle.below_pct):
            summary = (
                f"job {row['job_id']} holds {row['gpus']} GPU(s) under {idle.below_pct:g}% "
                f"utilisation for {_duration(idle.for_s)} (at most {row['util_max']:.0f}%)"
            )
            labels = {"job": row["job_id"], "node": row["node_id"]}
            drafts.append(drafted(idle, "GpuIdle", f"GpuIdle/{row['job_id']}", summary, labels))
    starved = rules.conditions.vc_starved
    if starved.enabled:
        for row in await repository.starved_virtual_clusters(conn, starved.after_s):
            vc = row["virtual_cluster"]
            summary = (
                f"virtual cluster {vc}: {row['jobs']} job(s) wanting {row['gpus']} GPU(s) pending,"
                f" the oldest for {_duration(row['waited_s'])}, and none of its jobs started"
                f" in {_duration(starved.after_s)}"
            )
            drafts.append(drafted(starved, "VcStarved", f"VcStarved/{vc}", summary, {"virtual_cluster": vc}))
    down = rules.conditions.service_down
    if down.enabled:
        for row in await repository.silent_services(conn, down.after_s, down.services):
            service = row["service"]
            summary = (
                f"service {service} is down: none of its {row['instances']} instance(s) on record"
                f" was heard for {_duration(row['silent_s'])}"
            )
            drafts.append(
                drafted(down, "ServiceDown", f"ServiceDown/{service}", summary, {"service": service})
            )
    return drafts


async def reconcile_conditions(
    conn: Connection, rules: AlertRules, routing: Routing
) -> tuple[list[str], list[str]]:
    """Open the condition alerts that hold and resolve those that ended: (opened, resolved)."""
    drafts = await current_conditions(conn, rules)
    opened = [alert_id for d in drafts if (alert_id := await open_alert(conn, d, routing)) is not None]
    holding = {d.fingerprint for d in drafts}
    resolved = []
    for alert in await repository.open_condition_alerts(conn, list(CONDITION_RULES)):
        if alert.fingerprint not in holding and await resolve(
            conn, alert.id, "alerter", "the condition no longer holds", routing
        ):
            resolved.append(alert.id)
    return opened, resolved
