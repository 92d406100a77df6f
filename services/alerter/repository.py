"""All of the alerter's SQL."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from asyncpg import Record

from services.alerter.payloads import labels_of, payload_for, url_of
from services.alerter.routing import IMMEDIATE, Grouping, Receiver, Routing
from services.alerter.rule_config import RulesInForce
from services.alerter.rules import ONE_SHOT_RULES, AlertDraft
from shared.db.pool import Connection
from shared.db.queries import Queries
from shared.events import AlertChanged, AlertFiring
from shared.events.alerts import (
    AlertChangedData,
    AlertFiringData,
    AlertRulesRequestedData,
    Matcher,
    SilenceRequestedData,
)
from shared.ids import new_alert_id
from shared.outbox import append

SQL = Queries(Path(__file__).parent / "sql")
SOURCE = "corral/alerter"


async def open_alert(conn: Connection, draft: AlertDraft, routing: Routing) -> str | None:
    alert_id = await conn.fetchval(
        SQL.open_alert,
        new_alert_id(),
        draft.rule,
        draft.fingerprint,
        draft.severity,
        draft.summary,
        draft.labels,
        draft.annotations,
    )
    if alert_id is None:
        return None
    await conn.execute(SQL.record_transition, alert_id, None, "firing", "alerter", draft.summary)
    await _notify(conn, alert_id, "firing", "alerter", routing)
    event = AlertFiring(
        source=SOURCE,
        subject=alert_id,
        data=AlertFiringData(
            alert_id=alert_id,
            rule=draft.rule,
            severity=draft.severity,
            summary=draft.summary,
            labels=draft.labels,
        ),
    )
    await append(conn, event, aggregate=alert_id)
    return str(alert_id)


async def _announce(conn: Connection, row: Record, state: str, by: str, note: str) -> None:
    event = AlertChanged(
        source=SOURCE,
        subject=row["id"],
        data=AlertChangedData(
            alert_id=row["id"],
            rule=row["rule"],
            fingerprint=row["fingerprint"],
            state=state,
            by=by,
            note=note,
        ),
    )
    await append(conn, event, aggregate=row["id"])


async def acknowledge(conn: Connection, alert_id: str, by: str, note: str, routing: Routing) -> bool:
    """ "I'm on it": only a firing alert; False if it was not firing (or does not exist)."""
    row = await conn.fetchrow(SQL.acknowledge, alert_id, by)
    if row is None:
        return False
    await conn.execute(SQL.record_transition, alert_id, "firing", "acknowledged", by, note)
    await _announce(conn, row, "acknowledged", by, note)
    await _notify(conn, alert_id, "acknowledged", by, routing)
    return True


async def resolve(conn: Connection, alert_id: str, by: str, note: str, routing: Routing) -> bool:
    row = await conn.fetchrow(SQL.resolve, alert_id, by)
    if row is None:
        return False
    await conn.execute(SQL.record_transition, alert_id, row["previous_state"], "resolved", by, note)
    await _announce(conn, row, "resolved", by, note)
    await _notify(conn, alert_id, "resolved", by, routing)
    return True


async def resolve_fingerprint(conn: Connection, fingerprint: str, note: str, routing: Routing) -> bool:
    """The cause went away: resolve the open alert of that fingerprint, if any."""
    alert_id = await conn.fetchval(SQL.open_alert_by_fingerprint, fingerprint)
    return alert_id is not None and await resolve(conn, alert_id, "alerter", note, routing)


async def _notify(conn: Connection, alert_id: str, event: str, by: str, routing: Routing) -> None:
    """Queue the change (same transaction): a firing for every receiver the routing picks —
    logged as suppressed when a silence or an inhibition covers the alert — and an
    acknowledge or resolve for every receiver that was told of the firing (escalation
    receivers included), so no incident is left open anywhere. Each goes in its group."""
    row = await conn.fetchrow(SQL.alert_row, alert_id)
    assert row is not None  # changed in this very transaction
    alert = dict(row)
    labels = labels_of(alert)
    grouping = routing.route.grouping(labels, alert["fingerprint"])
    if event == "firing":
        plan = [(receiver, grouping) for receiver in routing.receivers_for(labels)]
        suppressed_by = await _suppression(conn, labels)
    else:
        told = await conn.fetch(SQL.receivers_told, alert_id)
        plan = [
            (receiver, replace(grouping, key=r["group_key"]))
            for r in told
            if (receiver := routing.receiver(r["receiver"])) is not None  # (one since removed: not told)
        ]
        suppressed_by = None
    for receiver, group in plan:
        await _enqueue(conn, alert, event, by, receiver, group, suppressed_by=suppressed_by)


async def _enqueue(
    conn: Connection,
    alert: dict[str, Any],
    event: str,
    by: str,
    receiver: Receiver,
    group: Grouping,
    *,
    round_: int = 0,
    repeat: bool = False,
    suppressed_by: str | None = None,
) -> bool:
    """Queue one notification, due when its group's timing says; False if this receiver is
    not told of this kind of change, or it was queued already."""
    body = payload_for(receiver, alert, event, by, group, repeat=repeat)
    if body is None:
        return False
    args = (alert["id"], event, receiver.name, receiver.kind, url_of(receiver), body, group.key, round_)
    if suppressed_by is not None:
        return await conn.execute(SQL.enqueue_suppressed, *args, suppressed_by) == "INSERT 0 1"
    due = None  # now: the default timing sends every change at once, without a query
    if group.wait_s or group.interval_s:
        due = await conn.fetchval(
            SQL.group_due, receiver.name, group.key, alert["id"], group.wait_s, group.interval_s,
            event == "firing",
        )  # fmt: skip
    return await conn.execute(SQL.enqueue_notification, *args, due) == "INSERT 0 1"


async def _suppression(conn: Connection, labels: dict[str, str]) -> str | None:
    """Why an alert with these labels must not be sent now, or None."""
    for row in await conn.fetch(SQL.active_silences):
        matchers = [Matcher.model_validate(m) for m in row["matchers"]]
        if all(m.matches(labels) for m in matchers):
            return f"silenced by {row['id']}"
    # Inhibition: while a node is unreachable, its other alerts are consequences of that.
    node = labels.get("node")
    if node and labels.get("rule") != "NodeUnreachable":
        unreachable = await conn.fetchval(SQL.open_unreachable_for_node, node)
        if unreachable is not None:
            return f"inhibited by {unreachable} (node {node} unreachable)"
    return None


async def apply_silence_request(conn: Connection, request: SilenceRequestedData) -> bool:
    if request.action == "expire":
        return await conn.execute(SQL.expire_silence, request.silence_id, request.by) == "UPDATE 1"
    status = await conn.execute(
        SQL.create_silence,
        request.silence_id,
        [m.model_dump() for m in request.matchers],
        request.starts_at,
        request.ends_at,
        request.by,
        request.comment,
    )
    return bool(status == "INSERT 0 1")


async def escalate_due(conn: Connection, routing: Routing) -> list[tuple[str, str]]:
    """Queue the escalation of alerts not acknowledged in time; returns (alert, receiver)
    pairs newly escalated. Runs periodically; the notification's unique key makes a
    repeated run harmless, and a silenced or inhibited alert escalates to nobody."""
    escalated = []
    for row in await conn.fetch(SQL.firing_alerts):
        alert = dict(row)
        labels = labels_of(alert)
        escalation = routing.escalation_for(labels)
        if escalation is None or alert["age_s"] < escalation[0]:
            continue
        if await _suppression(conn, labels) is not None:
            continue
        group = replace(IMMEDIATE, key=f"escalation:{alert['fingerprint']}")
        for receiver in escalation[1]:
            if await _enqueue(conn, alert, "firing", "alerter", receiver, group):
                note = f"not acknowledged in {escalation[0]:.0f}s: escalated to {receiver.name}"
                await conn.execute(SQL.record_transition, alert["id"], "firing", "firing", "alerter", note)
                escalated.append((alert["id"], receiver.name))
    return escalated


async def repeat_due(conn: Connection, routing: Routing) -> list[tuple[str, str]]:
    """Queue the next round of alerts still firing that nobody acknowledged: after their
    route's ``repeat_interval`` since a receiver was last told, or at once when the silence
    or inhibition that held them back is over (a maintenance window ended with the problem
    still there). One-shot alerts (a job failed) are told once. Returns the (alert,
    receiver) pairs queued; a repeated run is harmless."""
    repeated = []
    for row in await conn.fetch(SQL.repeat_candidates, list(ONE_SHOT_RULES)):
        alert = dict(row)
        labels = labels_of(alert)
        receiver = routing.receiver(row["receiver"])
        group = replace(routing.route.grouping(labels, alert["fingerprint"]), key=row["group_key"])
        due = row["last_state"] == "suppressed" or row["since_s"] >= group.repeat_s
        if receiver is None or not due or await _suppression(conn, labels) is not None:
            continue
        again = row["last_state"] == "sent"  # else told for the first time
        if await _enqueue(
            conn, alert, "firing", "alerter", receiver, group, round_=row["round"] + 1, repeat=again
        ):
            repeated.append((alert["id"], receiver.name))
    return repeated


async def set_rule_overrides(conn: Connection, request: AlertRulesRequestedData) -> None:
    overrides = request.overrides if request.action == "set" else {}
    await conn.execute(SQL.set_rule_overrides, overrides, request.by)


async def rule_overrides(conn: Connection) -> tuple[dict[str, Any], int]:
    row = await conn.fetchrow(SQL.rule_overrides)
    return (dict(row["overrides"]), int(row["version"])) if row else ({}, 0)


async def publish_rules_in_force(conn: Connection, rules: RulesInForce) -> None:
    path = str(rules.file.path) if rules.file.path else None
    await conn.execute(
        SQL.publish_rules_in_force, rules.current.model_dump(), path, rules.problem, rules.overrides_version
    )
