"""Grouping as Alertmanager does it, on real Postgres and real HTTP receivers: a burst of
alerts about one node is one message, later changes are batched per group_interval, an
alert nobody acknowledges is said again after repeat_interval, and one held back by a
silence is sent when the silence ends."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx

from services.alerter.alert_lifecycle import acknowledge, open_alert, resolve
from services.alerter.delivery import Deliverer
from services.alerter.notifications import repeat_due
from services.alerter.repository import apply_silence_request
from services.alerter.routing import Routing, parse_routing
from services.alerter.rules import AlertDraft
from services.alerter.settings import AlerterSettings
from shared.db.pool import Database
from shared.events.alerts import Matcher, SilenceRequestedData
from tests.fixtures.receivers import Receivers

SETTINGS = AlerterSettings(delivery_timeout_s=1.0, max_backoff_s=0.05, delivery_lease_s=0.5)


def grouped_routing(recv: Receivers, **timing: str) -> Routing:
    settings = "\n      ".join(f"{k}: {v}" for k, v in timing.items())
    return parse_routing(
        f"""
receivers:
  - {{name: hook, webhook: {{url: "{recv.url("hook")}"}}}}
  - {{name: chat, slack: {{url: "{recv.url("chat")}"}}}}
  - {{name: pd, pagerduty: {{routing_key: R0KEY, url: "{recv.url("pd")}"}}}}
route:
  receivers: [hook, chat, pd]
  routes:
    - match: {{rule: GpuXid}}
      group_by: [node]
      {settings}
"""
    )


def xid(node: str, gpu: int) -> AlertDraft:
    return AlertDraft(
        "GpuXid",
        f"GpuXid/{node}/{gpu}",
        "critical",
        f"node {node} GPU {gpu}: Xid 79",
        {"node": node, "gpu": str(gpu)},
    )


async def fire(db: Database, routing: Routing, *drafts: AlertDraft) -> list[str]:
    ids = []
    async with db.transaction() as conn:
        for draft in drafts:
            alert_id = await open_alert(conn, draft, routing)
            assert alert_id is not None
            ids.append(alert_id)
    return ids


async def test_a_burst_about_one_node_is_one_message_per_receiver_after_group_wait(
    db: Database, receivers: Receivers
) -> None:
    routing = grouped_routing(receivers, group_wait="0.5s", group_interval="1s")
    await fire(db, routing, xid("n1", 0), xid("n1", 3), xid("n2", 5), xid("n1", 7))
    async with httpx.AsyncClient() as http:
        deliverer = Deliverer(db, SETTINGS, http)
        assert await deliverer.deliver_due() == 0  # group_wait: the rest of the burst may come
        await asyncio.sleep(0.6)
        assert await deliverer.deliver_due() == 12  # 4 alerts x 3 receivers, in 2 + 2 + 4 messages
    hooks = sorted(receivers.bodies("hook"), key=lambda b: b["groupKey"])
    assert [b["groupKey"] for b in hooks] == [
        '{}/{rule="GpuXid"}:{node="n1"}',
        '{}/{rule="GpuXid"}:{node="n2"}',
    ]
    n1 = hooks[0]
    assert n1["groupLabels"] == {"node": "n1"}
    assert n1["status"] == "firing"
    assert [a["labels"]["gpu"] for a in n1["alerts"]] == ["0", "3", "7"]
    assert n1["commonLabels"] == {
        "node": "n1",
        "alertname": "GpuXid",
        "rule": "GpuXid",
        "severity": "critical",
    }
    chats = sorted(b["text"] for b in receivers.bodies("chat"))
    assert chats[0].startswith("3 alerts:\n[CRITICAL] GpuXid: node n1 GPU 0: Xid 79 — FIRING")
    assert chats[1] == "[CRITICAL] GpuXid: node n2 GPU 5: Xid 79 — FIRING"
    # PagerDuty takes one event per request: one incident per alert, sent with the group.
    assert sorted(b["dedup_key"] for b in receivers.bodies("pd")) == [
        "GpuXid/n1/0", "GpuXid/n1/3", "GpuXid/n1/7", "GpuXid/n2/5"
    ]  # fmt: skip


async def test_later_changes_to_a_group_wait_for_group_interval_and_go_together(
    db: Database, receivers: Receivers
) -> None:
    routing = grouped_routing(receivers, group_wait="0s", group_interval="1s")
    (first,) = await fire(db, routing, xid("n1", 0))
    async with httpx.AsyncClient() as http:
        deliverer = Deliverer(db, SETTINGS, http)
        assert await deliverer.deliver_due() == 3  # a new group, no wait: sent at once
        second, third = await fire(db, routing, xid("n1", 1), xid("n1", 2))
        async with db.transaction() as conn:
            assert await resolve(conn, first, "alerter", "GPU 0 back", routing)
        assert await deliverer.deliver_due() == 0  # the group spoke less than 1 s ago
        await asyncio.sleep(1.05)
        assert await deliverer.deliver_due() == 9  # (2 firing + 1 resolved) x 3 receivers
        # Another node is another group: not held back by n1's interval.
        await fire(db, routing, xid("n2", 0))
        assert await deliverer.deliver_due() == 3
    batch = receivers.bodies("hook")[1]
    assert batch["status"] == "firing"
    assert sorted((a["labels"]["gpu"], a["status"]) for a in batch["alerts"]) == [
        ("0", "resolved"), ("1", "firing"), ("2", "firing")
    ]  # fmt: skip
    assert batch["commonLabels"]["node"] == "n1"
    assert "gpu" not in batch["commonLabels"]
    assert receivers.bodies("chat")[1]["text"].startswith("3 alerts:\n")
    assert len(receivers.bodies("pd")) == 5  # one event per alert change, never batched
    assert len(receivers.bodies("hook")) == 3  # n1 first; n1's three changes together; n2
    sent = await db.fetch("SELECT DISTINCT alert_id FROM alerter.notifications WHERE receiver = 'hook'")
    assert {first, second, third} <= {r["alert_id"] for r in sent}


async def test_an_alert_nobody_acknowledges_is_said_again_after_repeat_interval(
    db: Database, receivers: Receivers
) -> None:
    routing = grouped_routing(receivers, repeat_interval="0.3s")
    ignored, handled = await fire(db, routing, xid("n1", 0), xid("n2", 0))
    async with httpx.AsyncClient() as http:
        deliverer = Deliverer(db, SETTINGS, http)
        assert await deliverer.deliver_due() == 6
        async with db.transaction() as conn:
            assert await repeat_due(conn, routing) == []  # too early
            assert await acknowledge(conn, handled, "dana", "on it", routing)
        await asyncio.sleep(0.35)
        async with db.transaction() as conn:
            repeated = await repeat_due(conn, routing)
            assert await repeat_due(conn, routing) == []  # queued once per round
        assert sorted(repeated) == [(ignored, "chat"), (ignored, "hook"), (ignored, "pd")]
        await deliverer.deliver_due()
    texts = [b["text"] for b in receivers.bodies("chat")]
    assert texts[-1] == "[CRITICAL] GpuXid: node n1 GPU 0: Xid 79 — STILL FIRING"
    rounds = await db.fetch(
        "SELECT round, state FROM alerter.notifications"
        " WHERE alert_id = $1 AND receiver = 'chat' ORDER BY id",
        ignored,
    )
    assert [(r["round"], r["state"]) for r in rounds] == [(0, "sent"), (1, "sent")]


async def test_an_alert_a_silence_held_back_is_sent_when_the_silence_ends(
    db: Database, receivers: Receivers
) -> None:
    routing = grouped_routing(receivers)
    now = datetime.now(UTC)
    window = SilenceRequestedData(
        silence_id="sil-maint",
        action="create",
        by="admin",
        matchers=[Matcher(name="node", op="=", value="n1")],
        starts_at=now - timedelta(seconds=1),
        ends_at=now + timedelta(seconds=0.5),
        comment="maintenance window",
    )
    async with db.transaction() as conn:
        assert await apply_silence_request(conn, window)
    (alert_id,) = await fire(db, routing, xid("n1", 0))
    async with httpx.AsyncClient() as http:
        deliverer = Deliverer(db, SETTINGS, http)
        assert await deliverer.deliver_due() == 0  # suppressed, logged
        async with db.transaction() as conn:
            assert await repeat_due(conn, routing) == []  # still in the window
        await asyncio.sleep(0.6)
        async with db.transaction() as conn:
            assert len(await repeat_due(conn, routing)) == 3  # window over, problem still there
        assert await deliverer.deliver_due() == 3
    assert receivers.bodies("chat")[0]["text"].endswith("— FIRING")
    states = await db.fetch(
        "SELECT round, state FROM alerter.notifications"
        " WHERE alert_id = $1 AND receiver = 'hook' ORDER BY id",
        alert_id,
    )
    assert [(r["round"], r["state"]) for r in states] == [(0, "suppressed"), (1, "sent")]
