"""Notifications to real HTTP receivers on loopback: formats, retries, slow receivers, crashes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from services.alerter.alert_lifecycle import open_alert, resolve
from services.alerter.delivery import Deliverer
from services.alerter.routing import parse_routing
from services.alerter.rules import AlertDraft
from services.alerter.settings import AlerterSettings
from shared.db.pool import Database
from tests.fixtures.receivers import Receivers


def routing_for(recv: Receivers, **paths: str) -> str:
    lines = ["receivers:"]
    for name, path in paths.items():
        kind = "pagerduty" if name == "pd" else "slack" if name == "chat" else "webhook"
        extra = "routing_key: R0KEY, " if kind == "pagerduty" else ""
        lines.append(f"  - {{name: {name}, {kind}: {{{extra}url: '{recv.url(path)}'}}}}")
    lines.append(f"route: {{receivers: [{', '.join(paths)}]}}")
    return "\n".join(lines)


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


def settings(**overrides: float) -> AlerterSettings:
    values = {"delivery_timeout_s": 1.0, "max_backoff_s": 0.05, "delivery_lease_s": 0.5}
    return AlerterSettings.model_validate(values | overrides)


async def fire(db: Database, routing_text: str) -> str:
    draft = AlertDraft(
        "GpuUnhealthy", "GpuUnhealthy/n7", "critical", "node n7 drained: GPU 3: Xid 79", {"node": "n7"}
    )
    async with db.transaction() as conn:
        alert_id = await open_alert(conn, draft, parse_routing(routing_text))
    assert alert_id is not None
    return alert_id


async def notifications(db: Database) -> list[dict[str, Any]]:
    rows = await db.fetch(
        "SELECT receiver, event, state, attempts, last_status FROM alerter.notifications ORDER BY id"
    )
    return [dict(r) for r in rows]


async def test_each_receiver_gets_its_own_format_and_a_resolve_follows(
    db: Database, receivers: Receivers
) -> None:
    routing = routing_for(receivers, hook="hook", pd="pd", chat="chat")
    alert_id = await fire(db, routing)
    async with httpx.AsyncClient() as http:
        deliverer = Deliverer(db, settings(), http)
        assert await deliverer.deliver_due() == 3
        async with db.transaction() as conn:
            await resolve(conn, alert_id, "alerter", "node n7 undrained", parse_routing(routing))
        assert await deliverer.deliver_due() == 3
    (firing, resolved) = receivers.bodies("hook")
    assert firing["version"] == "4"
    assert firing["status"] == "firing"
    assert firing["alerts"][0]["labels"] == {
        "node": "n7",
        "alertname": "GpuUnhealthy",
        "rule": "GpuUnhealthy",
        "severity": "critical",
    }
    assert firing["alerts"][0]["annotations"]["summary"].endswith("Xid 79")
    assert firing["alerts"][0]["endsAt"] == "0001-01-01T00:00:00Z"
    assert resolved["status"] == "resolved"
    assert resolved["alerts"][0]["endsAt"] != "0001-01-01T00:00:00Z"
    trigger, resolve_pd = receivers.bodies("pd")
    assert trigger["event_action"] == "trigger"
    assert trigger["routing_key"] == "R0KEY"
    assert trigger["dedup_key"] == "GpuUnhealthy/n7"
    assert trigger["payload"]["severity"] == "critical"
    assert trigger["payload"]["source"] == "n7"
    assert resolve_pd == {"routing_key": "R0KEY", "event_action": "resolve", "dedup_key": "GpuUnhealthy/n7"}
    assert receivers.bodies("chat")[0]["text"].startswith("[CRITICAL] GpuUnhealthy: node n7 drained")
    assert all(n["state"] == "sent" for n in await notifications(db))


async def test_5xx_is_retried_with_backoff_and_4xx_is_not(db: Database, receivers: Receivers) -> None:
    await fire(db, routing_for(receivers, flaky="flaky", bad="bad"))
    async with httpx.AsyncClient() as http:
        deliverer = Deliverer(db, settings(), http)
        deadline = time.monotonic() + 10
        while any(n["state"] == "pending" for n in await notifications(db)):
            assert time.monotonic() < deadline
            await deliverer.deliver_due()
            await asyncio.sleep(0.05)
    by_receiver = {n["receiver"]: n for n in await notifications(db)}
    assert by_receiver["flaky"] == {
        "receiver": "flaky",
        "event": "firing",
        "state": "sent",
        "attempts": 3,
        "last_status": 200,
    }
    assert by_receiver["bad"]["state"] == "failed"
    assert by_receiver["bad"]["attempts"] == 1
    assert by_receiver["bad"]["last_status"] == 400
    assert len(receivers.bodies("flaky")) == 3
    assert len(receivers.bodies("bad")) == 1


@pytest.mark.slow
async def test_a_hanging_receiver_does_not_hold_up_the_others(db: Database, receivers: Receivers) -> None:
    await fire(db, routing_for(receivers, slow="hang", hook="hook"))
    async with httpx.AsyncClient() as http:
        deliverer = Deliverer(db, settings(delivery_timeout_s=3.0), http)
        started = time.monotonic()
        round_ = asyncio.create_task(deliverer.deliver_due())
        await until(lambda: bool(receivers.bodies("hook")))
        took = time.monotonic() - started
        await round_
    assert took < 1.0  # the webhook was sent while the other receiver still hung
    states = {n["receiver"]: n["state"] for n in await notifications(db)}
    assert states == {"slow": "pending", "hook": "sent"}  # the slow one timed out: retried later


async def test_a_delivery_cut_off_by_a_crash_is_sent_again(db: Database, receivers: Receivers) -> None:
    """The alerter dies mid-request (here: its delivery task is cancelled): once the lease
    runs out, the next alerter sends it again — a duplicate at worst, never a loss."""
    await fire(db, routing_for(receivers, hook="hang"))
    async with httpx.AsyncClient() as http:
        first = asyncio.create_task(Deliverer(db, settings(delivery_timeout_s=20.0), http).deliver_due())
        await until(lambda: bool(receivers.bodies("hang")))
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
    assert (await notifications(db))[0]["state"] == "pending"
    await db.execute(
        "UPDATE alerter.notifications SET url = $1", receivers.url("hook")
    )  # the receiver recovered
    async with httpx.AsyncClient() as http:
        restarted = Deliverer(db, settings(), http)
        assert await restarted.deliver_due() == 0  # still leased to the dead alerter
        await asyncio.sleep(0.6)
        assert await restarted.deliver_due() == 1
    assert (await notifications(db))[0]["state"] == "sent"
    assert len(receivers.bodies("hook")) == 1


async def test_a_resolve_never_overtakes_its_trigger(db: Database, receivers: Receivers) -> None:
    routing = routing_for(receivers, pd="pd")
    alert_id = await fire(db, routing)
    async with db.transaction() as conn:  # resolved before anything was sent
        await resolve(conn, alert_id, "alerter", "over already", parse_routing(routing))
    async with httpx.AsyncClient() as http:
        deliverer = Deliverer(db, settings(), http)
        assert await deliverer.deliver_due() == 1  # the trigger alone
        assert await deliverer.deliver_due() == 1  # then the resolve
    assert [b["event_action"] for b in receivers.bodies("pd")] == ["trigger", "resolve"]
