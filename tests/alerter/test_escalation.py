"""Escalation: an alert nobody acknowledges in time also goes to the next receiver, once."""

from __future__ import annotations

import asyncio
from typing import Literal

from services.alerter.alert_lifecycle import acknowledge, open_alert, resolve
from services.alerter.notifications import escalate_due
from services.alerter.routing import parse_routing
from services.alerter.rules import AlertDraft
from shared.db.pool import Database

ROUTING = parse_routing(
    """
receivers:
  - {name: oncall, pagerduty: {routing_key: K1, url: "http://127.0.0.1:9/pd"}}
  - {name: lead, pagerduty: {routing_key: K2, url: "http://127.0.0.1:9/pd-lead"}}
  - {name: chat, slack: {url: "http://127.0.0.1:9/chat"}}
route:
  receiver: chat
  routes:
    - match: {severity: critical}
      receiver: oncall
      escalate: {after_s: 0.3, to: [lead]}
"""
)


def draft(node: str, severity: Literal["warning", "critical"] = "critical") -> AlertDraft:
    return AlertDraft(
        "GpuUnhealthy", f"GpuUnhealthy/{node}", severity, f"node {node} drained", {"node": node}
    )


async def test_unacknowledged_critical_alerts_escalate_once(db: Database) -> None:
    async with db.transaction() as conn:
        ignored = await open_alert(conn, draft("n1"), ROUTING)
        handled = await open_alert(conn, draft("n2"), ROUTING)
        minor = await open_alert(conn, draft("n3", "warning"), ROUTING)
        assert await escalate_due(conn, ROUTING) == []  # too early
        assert handled is not None
        assert await acknowledge(conn, handled, "dana", "on it", ROUTING)
    await asyncio.sleep(0.4)
    async with db.transaction() as conn:
        assert await escalate_due(conn, ROUTING) == [(ignored, "lead")]
        assert await escalate_due(conn, ROUTING) == []  # once
    rows = await db.fetch(
        "SELECT alert_id, receiver FROM alerter.notifications WHERE event = 'firing' ORDER BY id"
    )
    assert [(r["alert_id"], r["receiver"]) for r in rows] == [
        (ignored, "oncall"),
        (handled, "oncall"),
        (minor, "chat"),
        (ignored, "lead"),
    ]
    notes = await db.fetch(
        "SELECT note FROM alerter.alert_transitions WHERE alert_id = $1 ORDER BY id", ignored
    )
    assert notes[-1]["note"] == "not acknowledged in 0s: escalated to lead"


async def test_an_escalated_alert_is_resolved_at_every_receiver_it_reached(db: Database) -> None:
    async with db.transaction() as conn:
        alert_id = await open_alert(conn, draft("n4"), ROUTING)
    assert alert_id is not None
    await asyncio.sleep(0.4)
    async with db.transaction() as conn:
        assert await escalate_due(conn, ROUTING) == [(alert_id, "lead")]
        assert await resolve(conn, alert_id, "alerter", "node n4 undrained", ROUTING)
    rows = await db.fetch(
        "SELECT receiver, event FROM alerter.notifications WHERE alert_id = $1 ORDER BY id", alert_id
    )
    assert [(r["receiver"], r["event"]) for r in rows] == [
        ("oncall", "firing"),
        ("lead", "firing"),
        ("oncall", "resolved"),
        ("lead", "resolved"),
    ]
