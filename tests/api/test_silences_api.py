"""Silences through the API: validation, admin-only, requests for the alerter, status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from services.alerter.repository import apply_silence_request
from services.api.tenants.auth import hash_token, upsert_token
from services.api.tenants.repository import TenantRepository
from shared.db.pool import Database
from shared.events import parse_event
from shared.events.alerts import SilenceRequested


async def test_a_silence_is_requested_then_listed_with_its_status(
    client: httpx.AsyncClient, db: Database
) -> None:
    response = await client.post(
        "/api/v1/silences",
        json={
            "matchers": [{"name": "node", "op": "=~", "value": "rack4-.*"}],
            "duration_s": 7200,
            "comment": "PDU swap",
        },
    )
    assert response.status_code == 202, response.text
    silence_id = response.json()["id"]
    (row,) = await db.fetch("SELECT payload FROM corral.outbox WHERE subject LIKE 'corral.alert.silence%'")
    event = parse_event(row["payload"])
    assert isinstance(event, SilenceRequested)
    assert (await client.get(f"/api/v1/silences/{silence_id}")).status_code == 404  # not applied yet
    async with db.transaction() as conn:  # what the alerter does with the request
        await apply_silence_request(conn, event.data)
    listed = (await client.get("/api/v1/silences")).json()["items"]
    assert [(s["id"], s["status"], s["created_by"], s["comment"]) for s in listed] == [
        (silence_id, "active", "admin", "PDU swap")
    ]
    assert (await client.delete(f"/api/v1/silences/{silence_id}")).status_code == 202


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"matchers": [], "duration_s": 600}, "matchers"),
        (
            {"matchers": [{"name": "node", "op": "=~", "value": "(unclosed"}], "duration_s": 600},
            "matchers.0.value",
        ),
        ({"matchers": [{"name": "no de", "value": "x"}], "duration_s": 600}, "matchers.0.name"),
        ({"matchers": [{"name": "node", "op": "~", "value": "x"}], "duration_s": 600}, "matchers.0.op"),
        ({"matchers": [{"name": "node", "value": "x"}]}, "ends_at and duration_s"),
        ({"matchers": [{"name": "node", "value": "x"}], "duration_s": 10}, "duration_s"),
    ],
)
async def test_bad_silences_are_refused_naming_the_field(
    client: httpx.AsyncClient, db: Database, body: dict[str, object], field: str
) -> None:
    response = await client.post("/api/v1/silences", json=body)
    assert response.status_code == 422
    assert field in response.text
    assert not await db.fetch("SELECT 1 FROM corral.outbox WHERE subject LIKE 'corral.alert.silence%'")


async def test_windows_in_the_past_or_too_long_and_users_are_refused(
    client: httpx.AsyncClient, db: Database
) -> None:
    now = datetime.now(UTC)
    matchers = [{"name": "node", "value": "x"}]
    past = {
        "matchers": matchers,
        "starts_at": (now - timedelta(hours=2)).isoformat(),
        "ends_at": (now - timedelta(hours=1)).isoformat(),
    }
    assert (await client.post("/api/v1/silences", json=past)).status_code == 422
    endless = {"matchers": matchers, "ends_at": (now + timedelta(days=400)).isoformat()}
    assert "90 days" in (await client.post("/api/v1/silences", json=endless)).text
    far = {"matchers": matchers, "starts_at": "9999-12-31T00:00:00Z", "duration_s": 86400 * 5}
    assert (await client.post("/api/v1/silences", json=far)).status_code == 422
    huge_regex = {"matchers": [{"name": "node", "op": "=~", "value": "a{9999999999}"}], "duration_s": 600}
    assert (await client.post("/api/v1/silences", json=huge_regex)).status_code == 422
    nul = {"matchers": matchers, "duration_s": 600, "comment": "a\u0000b"}
    assert (await client.post("/api/v1/silences", json=nul)).status_code == 422
    naive = {"matchers": matchers, "ends_at": "2099-01-01T00:00:00"}
    assert "timezone" in (await client.post("/api/v1/silences", json=naive)).text
    await upsert_token(TenantRepository(db), "tok-alice", "alice", hash_token("crl_alice"), "user", "alice")
    alice = {"Authorization": "Bearer crl_alice"}
    refused = await client.post(
        "/api/v1/silences", json={"matchers": matchers, "duration_s": 600}, headers=alice
    )
    assert refused.status_code == 403
    assert (await client.delete("/api/v1/silences/sil-nope")).status_code == 404
    assert not await db.fetch("SELECT 1 FROM corral.outbox WHERE subject LIKE 'corral.alert.silence%'")
