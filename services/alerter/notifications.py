"""Who is told of an alert's change, and when: the notification queue's decisions.

A change queues one ``alerter.notifications`` row per receiver, in the transaction of
the change (``delivery.py`` sends them): a firing goes to every receiver the routing
picks — logged ``suppressed`` instead when a silence or an inhibition covers the alert
— and an acknowledge or resolve to every receiver that was told of the firing
(escalation receivers included), so no incident is left open anywhere. Each row is due
when its group's timing says (``group_wait``, ``group_interval``). The periodic
follow-ups queue escalations (``escalate_due``) and repeats (``repeat_due``); the
notification's unique key makes a repeated run harmless.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from services.alerter import repository
from services.alerter.payloads import labels_of, payload_for, url_of
from services.alerter.repository import Notification
from services.alerter.routing import IMMEDIATE, Grouping, Receiver, Routing
from services.alerter.rules import ONE_SHOT_RULES
from shared.db.pool import Connection
from shared.events.alerts import Matcher


async def notify(conn: Connection, alert_id: str, event: str, by: str, routing: Routing) -> None:
    """Queue the change of ``alert_id`` (same transaction) for the receivers it concerns;
    each goes in its group (see the module doc)."""
    alert = await repository.alert_row(conn, alert_id)
    assert alert is not None  # changed in this very transaction
    labels = labels_of(alert)
    grouping = routing.route.grouping(labels, alert["fingerprint"])
    if event == "firing":
        plan = [(receiver, grouping) for receiver in routing.receivers_for(labels)]
        suppressed_by = await suppression(conn, labels)
    else:
        told = await repository.receivers_told(conn, alert_id)
        plan = [
            (receiver, replace(grouping, key=r.group_key))
            for r in told
            if (receiver := routing.receiver(r.receiver)) is not None  # (one since removed: not told)
        ]
        suppressed_by = None
    for receiver, group in plan:
        await enqueue(conn, alert, event, by, receiver, group, suppressed_by=suppressed_by)


async def enqueue(
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
    notification = Notification(
        alert["id"], event, receiver.name, receiver.kind, url_of(receiver), body, group.key, round_
    )
    if suppressed_by is not None:
        return await repository.enqueue_suppressed(conn, notification, suppressed_by)
    due = None  # now: the default timing sends every change at once, without a query
    if group.wait_s or group.interval_s:
        due = await repository.group_due(
            conn, receiver.name, group.key, alert["id"], group.wait_s, group.interval_s, event == "firing"
        )
    return await repository.enqueue_notification(conn, notification, due)


async def suppression(conn: Connection, labels: dict[str, str]) -> str | None:
    """Why an alert with these labels must not be sent now, or None."""
    for silence in await repository.active_silences(conn):
        matchers = [Matcher.model_validate(m) for m in silence.matchers]
        if all(m.matches(labels) for m in matchers):
            return f"silenced by {silence.id}"
    # Inhibition: while a node is unreachable, its other alerts are consequences of that.
    node = labels.get("node")
    if node and labels.get("rule") != "NodeUnreachable":
        unreachable = await repository.open_unreachable_for_node(conn, node)
        if unreachable is not None:
            return f"inhibited by {unreachable} (node {node} unreachable)"
    return None


async def escalate_due(conn: Connection, routing: Routing) -> list[tuple[str, str]]:
    """Queue the escalation of alerts not acknowledged in time; returns (alert, receiver)
    pairs newly escalated. Runs periodically; the notification's unique key makes a
    repeated run harmless, and a silenced or inhibited alert escalates to nobody."""
    escalated = []
    for alert in await repository.firing_alerts(conn):
        labels = labels_of(alert)
        escalation = routing.escalation_for(labels)
        if escalation is None or alert["age_s"] < escalation[0]:
            continue
        if await suppression(conn, labels) is not None:
            continue
        group = replace(IMMEDIATE, key=f"escalation:{alert['fingerprint']}")
        for receiver in escalation[1]:
            if await enqueue(conn, alert, "firing", "alerter", receiver, group):
                note = f"not acknowledged in {escalation[0]:.0f}s: escalated to {receiver.name}"
                await repository.record_transition(conn, alert["id"], "firing", "firing", "alerter", note)
                escalated.append((alert["id"], receiver.name))
    return escalated


async def repeat_due(conn: Connection, routing: Routing) -> list[tuple[str, str]]:
    """Queue the next round of alerts still firing that nobody acknowledged: after their
    route's ``repeat_interval`` since a receiver was last told, or at once when the silence
    or inhibition that held them back is over (a maintenance window ended with the problem
    still there). One-shot alerts (a job failed) are told once. Returns the (alert,
    receiver) pairs queued; a repeated run is harmless."""
    repeated = []
    for alert in await repository.repeat_candidates(conn, list(ONE_SHOT_RULES)):
        labels = labels_of(alert)
        receiver = routing.receiver(alert["receiver"])
        group = replace(routing.route.grouping(labels, alert["fingerprint"]), key=alert["group_key"])
        due = alert["last_state"] == "suppressed" or alert["since_s"] >= group.repeat_s
        if receiver is None or not due or await suppression(conn, labels) is not None:
            continue
        again = alert["last_state"] == "sent"  # else told for the first time
        if await enqueue(
            conn, alert, "firing", "alerter", receiver, group, round_=alert["round"] + 1, repeat=again
        ):
            repeated.append((alert["id"], receiver.name))
    return repeated
