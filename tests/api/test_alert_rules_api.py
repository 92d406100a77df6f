"""Alert rules through the API: overrides validated field by field, recorded for the
alerter, merged over its rules file, shown as in force; admin only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from services.alerter.repository import publish_rules_in_force, rule_overrides, set_rule_overrides
from services.alerter.rule_config import RulesInForce
from services.api.tenants.auth import hash_token, upsert_token
from services.api.tenants.repository import TenantRepository
from shared.db.pool import Database
from shared.events import parse_event
from shared.events.alerts import AlertRulesRequested


async def requests(db: Database) -> list[AlertRulesRequested]:
    rows = await db.fetch(
        "SELECT payload FROM corral.outbox WHERE subject LIKE 'corral.alert.rules%' ORDER BY id"
    )
    events = [parse_event(r["payload"]) for r in rows]
    assert all(isinstance(e, AlertRulesRequested) for e in events)
    return events  # type: ignore[return-value]


async def alerter_applies(db: Database, rules: RulesInForce, event: AlertRulesRequested) -> None:
    """What the alerter does with the request (services/alerter/handlers.py and app.py)."""
    async with db.transaction() as conn:
        await set_rule_overrides(conn, event.data)
        overrides, version = await rule_overrides(conn)
        rules.refresh(overrides, version)
        await publish_rules_in_force(conn, rules)


async def test_overrides_merge_over_the_rules_file_and_show_as_in_force(
    client: httpx.AsyncClient, db: Database, tmp_path: Path
) -> None:
    before = (await client.get("/api/v1/alert-rules")).json()
    assert before["rules"] is None
    assert "alerter has not started" in before["detail"]
    rules_file = tmp_path / "alert-rules.yaml"
    rules_file.write_text("events:\n  job_failed: {severity: critical}\n")
    rules = RulesInForce(rules_file)
    overrides: dict[str, Any] = {
        "conditions": {"job_pending_too_long": {"after_s": 900}},
        "events": {"job_failed": {"labels": {"team": "ml-platform"}}},
    }
    response = await client.put("/api/v1/alert-rules", json=overrides)
    assert response.status_code == 202, response.text
    (event,) = await requests(db)
    assert event.data.overrides == overrides  # only what was given: the file keeps the rest
    assert event.data.by == "admin"
    await alerter_applies(db, rules, event)
    shown = (await client.get("/api/v1/alert-rules")).json()
    assert shown["detail"] == "in force"
    assert shown["overrides"] == overrides
    assert (shown["overrides_version"], shown["in_force_version"], shown["overrides_by"]) == (1, 1, "admin")
    assert shown["file"] == str(rules_file)
    job_failed = shown["rules"]["events"]["job_failed"]
    assert (job_failed["severity"], job_failed["labels"]) == (
        "critical",
        {"team": "ml-platform"},
    )  # file + API
    assert shown["rules"]["conditions"]["job_pending_too_long"]["after_s"] == 900
    assert shown["rules"]["conditions"]["gpu_idle"]["for_s"] == 3600  # the shipped default

    assert (await client.delete("/api/v1/alert-rules")).status_code == 202
    await alerter_applies(db, rules, (await requests(db))[-1])
    reset = (await client.get("/api/v1/alert-rules")).json()
    assert reset["overrides"] == {}
    assert reset["rules"]["events"]["job_failed"] == {
        "severity": "critical", "runbook": "", "labels": {}, "annotations": {}
    }  # fmt: skip
    assert reset["rules"]["conditions"]["job_pending_too_long"]["after_s"] == 3600


async def test_a_bad_override_is_refused_naming_the_field_and_changes_nothing(
    client: httpx.AsyncClient, db: Database
) -> None:
    for document, field in [
        ({"conditions": {"gpu_idle": {"below_pct": 500}}}, "conditions.gpu_idle.below_pct"),
        ({"events": {"job_failed": {"severity": "page"}}}, "events.job_failed.severity"),
        ({"conditions": {"disk_full": {"enabled": True}}}, "conditions.disk_full"),
        ({"events": {"job_failed": {"labels": {"team": 7}}}}, "events.job_failed.labels.team"),
        ([1, 2], "body"),
    ]:
        response = await client.put("/api/v1/alert-rules", json=document)
        assert response.status_code == 422, (document, response.text)
        problem = response.json()
        assert field in response.text, problem
    assert await requests(db) == []


async def test_only_an_admin_changes_the_rules(client: httpx.AsyncClient, db: Database) -> None:
    await upsert_token(TenantRepository(db), "tok-bob", "bob", hash_token("crl_bob"), "user", "bob")
    bob = {"Authorization": "Bearer crl_bob"}
    refused = await client.put("/api/v1/alert-rules", json={}, headers=bob)
    assert refused.status_code == 403
    assert "only an admin" in refused.json()["detail"]
    assert (await client.delete("/api/v1/alert-rules", headers=bob)).status_code == 403
    assert (await client.get("/api/v1/alert-rules", headers=bob)).status_code == 200  # anyone may read
    assert await requests(db) == []
