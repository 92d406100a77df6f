"""Silences and inhibition on real Postgres: what is suppressed is logged, never sent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.alerter.alert_lifecycle import open_alert, resolve
from services.alerter.repository import apply_silence_request
from services.alerter.routing import Routing, parse_routing
from services.alerter.rules import AlertDraft
from shared.db.pool import Database
from shared.events.alerts import Matcher, SilenceRequestedData

ROUTING = parse_routing(
    "receivers: [{name: hook, webhook: {url: 'http://127.0.0.1:9/hook'}}]\nroute: {receiver: hook}"
)


def gpu_alert(node: str) -> AlertDraft:
    return AlertDraft(
        "GpuUnhealthy", f"GpuUnhealthy/{node}", "critical", f"node {node} drained", {"node": node}
    )


async def silence(db: Database, silence_id: str, *matchers: Matcher, starts_in_s: float = -1.0) -> None:
    now = datetime.now(UTC)
    request = SilenceRequestedData(
        silence_id=silence_id,
        action="create",
        by="admin",
        matchers=list(matchers),
        starts_at=now + timedelta(seconds=starts_in_s),
        ends_at=now + timedelta(hours=2),
        comment="rack 4 maintenance",
    )
    async with db.transaction() as conn:
        assert await apply_silence_request(conn, request)


async def fire(db: Database, draft: AlertDraft, routing: Routing = ROUTING) -> str:
    async with db.transaction() as conn:
        alert_id = await open_alert(conn, draft, routing)
    assert alert_id is not None
    return alert_id


async def log(db: Database) -> list[tuple[str, str, str, str | None]]:
    rows = await db.fetch(
        "SELECT a.fingerprint, n.event, n.state, n.last_error FROM alerter.notifications n"
        " JOIN alerter.alerts a ON a.id = n.alert_id ORDER BY n.id"
    )
    return [(r["fingerprint"], r["event"], r["state"], r["last_error"]) for r in rows]


async def test_a_silence_suppresses_matching_alerts_only_and_logs_why(db: Database) -> None:
    await silence(
        db,
        "sil-1",
        Matcher(name="node", op="=~", value="gpu-4[0-9]"),
        Matcher(name="rule", value="GpuUnhealthy"),
    )
    muted = await fire(db, gpu_alert("gpu-41"))
    await fire(db, gpu_alert("gpu-7"))
    async with db.transaction() as conn:
        await resolve(conn, muted, "alerter", "undrained", ROUTING)  # no resolve for an unsent firing
    assert await log(db) == [
        ("GpuUnhealthy/gpu-41", "firing", "suppressed", "silenced by sil-1"),
        ("GpuUnhealthy/gpu-7", "firing", "pending", None),
    ]


async def test_an_expired_or_future_silence_suppresses_nothing(db: Database) -> None:
    await silence(db, "sil-later", Matcher(name="node", value="gpu-1"), starts_in_s=3600)
    await silence(db, "sil-now", Matcher(name="node", value="gpu-2"))
    async with db.transaction() as conn:
        expired = SilenceRequestedData(silence_id="sil-now", action="expire", by="admin")
        assert await apply_silence_request(conn, expired)
        assert not await apply_silence_request(conn, expired)  # already over
    await fire(db, gpu_alert("gpu-1"))
    await fire(db, gpu_alert("gpu-2"))
    assert [state for _, _, state, _ in await log(db)] == ["pending", "pending"]
    row = await db.fetchrow(
        "SELECT expired_by, ends_at <= now() AS over FROM alerter.silences WHERE id = 'sil-now'"
    )
    assert row is not None
    assert row["expired_by"] == "admin"
    assert row["over"] is True


async def test_an_unreachable_node_inhibits_its_other_alerts(db: Database) -> None:
    await fire(
        db, AlertDraft("NodeUnreachable", "NodeUnreachable/gpu-7", "critical", "gone", {"node": "gpu-7"})
    )
    await fire(db, gpu_alert("gpu-7"))
    await fire(db, gpu_alert("gpu-8"))
    entries = await log(db)
    assert entries[0][:3] == ("NodeUnreachable/gpu-7", "firing", "pending")
    assert entries[1][2] == "suppressed"
    assert entries[1][3] is not None
    assert "node gpu-7 unreachable" in entries[1][3]
    assert entries[2][:3] == ("GpuUnhealthy/gpu-8", "firing", "pending")
