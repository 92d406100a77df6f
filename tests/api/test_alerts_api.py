"""Alerts through the API: who sees which, acknowledge/resolve requests, history."""

from __future__ import annotations

import httpx

from services.alerter.alert_lifecycle import acknowledge, open_alert, resolve
from services.alerter.routing import Routing
from services.alerter.rules import AlertDraft
from services.api.tenants.auth import hash_token, upsert_token
from services.api.tenants.repository import TenantRepository
from shared.db.pool import Database


async def _alerts(db: Database, client: httpx.AsyncClient) -> tuple[str, str]:
    """Alice's job failed; a node's GPU is unhealthy. Returns both alert ids."""
    await upsert_token(TenantRepository(db), "tok-alice", "alice", hash_token("crl_alice"), "user", "alice")
    spec = {"name": "t", "tasks": [{"name": "main", "command": "true", "resources": {"gpus": 1}}]}
    alice_job = (
        await client.post("/api/v1/jobs", json=spec, headers={"Authorization": "Bearer crl_alice"})
    ).json()["id"]
    async with db.transaction() as conn:
        job_alert = await open_alert(
            conn,
            AlertDraft("JobFailed", f"JobFailed/{alice_job}/1", "warning", "job failed", {"job": alice_job}),
            Routing(),
        )
        node_alert = await open_alert(
            conn,
            AlertDraft("GpuUnhealthy", "GpuUnhealthy/n1", "critical", "node n1 drained", {"node": "n1"}),
            Routing(),
        )
    assert job_alert is not None
    assert node_alert is not None
    return job_alert, node_alert


def _as_alice(client: httpx.AsyncClient) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=client._transport, base_url=client.base_url, headers={"Authorization": "Bearer crl_alice"}
    )


async def test_admins_see_every_alert_and_users_only_their_jobs(
    client: httpx.AsyncClient, db: Database
) -> None:
    job_alert, node_alert = await _alerts(db, client)
    everything = (await client.get("/api/v1/alerts")).json()["items"]
    assert {a["id"] for a in everything} == {job_alert, node_alert}
    async with _as_alice(client) as alice:
        hers = (await alice.get("/api/v1/alerts")).json()["items"]
        assert [a["id"] for a in hers] == [job_alert]
        assert (await alice.get(f"/api/v1/alerts/{node_alert}")).status_code == 404
        accepted = await alice.post(f"/api/v1/alerts/{job_alert}/acknowledge", json={"note": "looking"})
        assert accepted.status_code == 202
        assert (await alice.post(f"/api/v1/alerts/{node_alert}/acknowledge")).status_code == 404


async def test_actions_are_requests_to_the_alerter_and_history_shows_who(
    client: httpx.AsyncClient, db: Database
) -> None:
    _, node_alert = await _alerts(db, client)
    response = await client.post(f"/api/v1/alerts/{node_alert}/acknowledge", json={"note": "on it"})
    assert response.status_code == 202, response.text
    subjects = [
        r["subject"]
        for r in await db.fetch("SELECT subject FROM corral.outbox WHERE subject LIKE 'corral.alert.action%'")
    ]
    assert subjects == [f"corral.alert.action_requested.{node_alert}"]
    async with db.transaction() as conn:  # what the alerter does with the request
        assert await acknowledge(conn, node_alert, "admin", "on it", Routing())
        assert not await acknowledge(conn, node_alert, "admin", "twice", Routing())
        assert await resolve(conn, node_alert, "alerter", "node n1 undrained", Routing())
    detail = (await client.get(f"/api/v1/alerts/{node_alert}")).json()
    assert detail["state"] == "resolved"
    assert detail["acknowledged_by"] == "admin"
    assert [(h["from_state"], h["to_state"], h["actor"], h["note"]) for h in detail["history"]] == [
        (None, "firing", "alerter", "node n1 drained"),
        ("firing", "acknowledged", "admin", "on it"),
        ("acknowledged", "resolved", "alerter", "node n1 undrained"),
    ]
    late = await client.post(f"/api/v1/alerts/{node_alert}/acknowledge")
    assert late.status_code == 409
    assert "resolved" in late.json()["detail"]


async def test_unknown_and_hostile_alert_ids(client: httpx.AsyncClient, db: Database) -> None:
    assert (await client.get("/api/v1/alerts/alr-nope")).status_code == 404
    for hostile in ("..%2Fetc", "alr-%3Bls", "x" * 100):
        assert (await client.post(f"/api/v1/alerts/{hostile}/resolve")).status_code in (404, 422)
    assert (await client.get("/api/v1/alerts", params={"state": "sleeping"})).status_code == 422
    too_long = await client.post("/api/v1/alerts/alr-nope/resolve", json={"note": "x" * 1001})
    assert too_long.status_code == 422
    assert not await db.fetch("SELECT 1 FROM corral.outbox WHERE subject LIKE 'corral.alert.action%'")
