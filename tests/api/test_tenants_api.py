"""Tenants through the API, with two teams: alice in group vision, bob in group speech, and
VCs vision and speech open only to their team. Each test shows one boundary holding: who
may submit where, whose jobs one sees, which VCs one sees, what a token's scopes allow,
that an expired or revoked token is refused, that admin endpoints are for admins, that
every mutating call is in the audit log, and that bad input changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from services.api.app import create_app
from services.api.settings import Settings
from services.api.tenants.auth import current_principal, hash_token
from services.api.tenants.repository import TenantRepository
from services.api.webhooks.repository import SQL as WEBHOOK_SQL
from shared.db.pool import Database
from shared.service import Health


@dataclass
class Teams:
    admin: httpx.AsyncClient
    alice: httpx.AsyncClient
    bob: httpx.AsyncClient


def _as(client: httpx.AsyncClient, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=client._transport, base_url=client.base_url, headers={"Authorization": f"Bearer {token}"}
    )


async def _token(admin: httpx.AsyncClient, user: str, *scopes: str, **fields: object) -> str:
    body = {"name": f"{user}'s", "user": user, "scopes": list(scopes or ("read", "submit")), **fields}
    created = await admin.post("/api/v1/tokens", json=body)
    assert created.status_code == 201, created.text
    return str(created.json()["token"])


def _spec(vc: str) -> dict[str, object]:
    task = {"name": "main", "command": "true", "resources": {"gpus": 0}}
    return {"name": "train", "virtual_cluster": vc, "tasks": [task]}


@pytest.fixture
async def teams(client: httpx.AsyncClient) -> AsyncIterator[Teams]:
    for user, group in (("alice", "vision"), ("bob", "speech")):
        assert (await client.post("/api/v1/users", json={"name": user})).status_code == 201
        assert (await client.post("/api/v1/groups", json={"name": group})).status_code == 201
        assert (await client.put(f"/api/v1/groups/{group}/members/{user}")).status_code == 200
        put = await client.put(f"/api/v1/virtual-clusters/{group}", json={"allowed_groups": [group]})
        assert put.status_code == 201, put.text
    async with (
        _as(client, await _token(client, "alice")) as alice,
        _as(client, await _token(client, "bob")) as bob,
    ):
        yield Teams(client, alice, bob)


async def _count(db: Database, table: str) -> int:
    return int(await db.fetchval(f"SELECT count(*) FROM {table}"))  # noqa: S608  # fixed names, a test


async def test_a_user_submits_only_to_vcs_their_groups_open(teams: Teams, db: Database) -> None:
    assert (await teams.alice.post("/api/v1/jobs", json=_spec("vision"))).status_code == 201
    assert (await teams.alice.post("/api/v1/jobs", json=_spec("default"))).status_code == 201
    before = await _count(db, "api.jobs")
    for vc in ("speech", "no-such-vc"):  # another team's and a missing one: the same answer
        refused = await teams.alice.post("/api/v1/jobs", json=_spec(vc))
        assert refused.status_code == 403, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["detail"] == (
            f"you may not submit to virtual cluster {vc!r}: it does not exist or none of your groups has"
            " access to it. `corral vcs` (GET /api/v1/virtual-clusters) lists those you can use; ask an"
            " admin to add one of your groups to its access list"
        )
        assert (await teams.alice.post("/api/v1/jobs/dry-run", json=_spec(vc))).status_code == 403
    assert await _count(db, "api.jobs") == before, "a refused job is not stored"
    # An admin may use every VC; a missing one is still a 422 that says so.
    assert (await teams.admin.post("/api/v1/jobs", json=_spec("speech"))).status_code == 201
    assert (await teams.admin.post("/api/v1/jobs", json=_spec("no-such-vc"))).status_code == 422
    # Access follows membership at once: bob joins vision.
    assert (await teams.admin.put("/api/v1/groups/vision/members/bob")).status_code == 200
    assert (await teams.bob.post("/api/v1/jobs", json=_spec("vision"))).status_code == 201


async def test_another_users_job_is_not_found(teams: Teams, db: Database) -> None:
    job = (await teams.bob.post("/api/v1/jobs", json=_spec("speech"))).json()["id"]
    mine = (await teams.alice.post("/api/v1/jobs", json=_spec("vision"))).json()["id"]
    for method, path in (
        ("GET", f"/api/v1/jobs/{job}"),
        ("POST", f"/api/v1/jobs/{job}/cancel"),
        ("GET", f"/api/v1/jobs/{job}/logs"),
    ):
        response = await teams.alice.request(method, path)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["detail"] == f"no job with id {job!r}; list your jobs with GET /api/v1/jobs"
    assert [j["id"] for j in (await teams.alice.get("/api/v1/jobs")).json()["items"]] == [mine]
    assert await db.fetchval("SELECT state FROM api.jobs WHERE id = $1", job) == "PENDING"
    # Admins see and cancel every job; the owner cancels their own.
    assert {j["id"] for j in (await teams.admin.get("/api/v1/jobs")).json()["items"]} == {job, mine}
    assert (await teams.admin.post(f"/api/v1/jobs/{job}/cancel")).json()["state"] == "CANCELLED"
    assert (await teams.alice.post(f"/api/v1/jobs/{mine}/cancel")).json()["state"] == "CANCELLED"


async def test_a_tensorboard_reads_only_event_files_of_a_job_its_submitter_may_read(
    teams: Teams, db: Database
) -> None:
    bobs = (await teams.bob.post("/api/v1/jobs", json=_spec("speech"))).json()["id"]
    alices = (await teams.alice.post("/api/v1/jobs", json=_spec("vision"))).json()["id"]

    def board(source: str) -> dict[str, object]:
        task = {
            "name": "tensorboard",
            "command": "true",
            "event_files_from": source,
            "ports": {"tensorboard": 1},
        }
        return {"name": "tensorboard", "virtual_cluster": "vision", "tasks": [task]}

    before = await _count(db, "api.jobs")
    refused = await teams.alice.post("/api/v1/jobs", json=board(bobs))
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"] == (
        f"tasks.tensorboard.event_files_from names job {bobs!r}, which does not exist or is not yours;"
        " name one of your own jobs (GET /api/v1/jobs lists them)"
    )
    assert await _count(db, "api.jobs") == before, "a refused job is not stored"
    assert (await teams.alice.post("/api/v1/jobs", json=board(alices))).status_code == 201


async def test_vcs_without_access_are_invisible(teams: Teams) -> None:
    async def names(client: httpx.AsyncClient) -> list[str]:
        return [v["name"] for v in (await client.get("/api/v1/virtual-clusters")).json()["items"]]

    await teams.bob.post("/api/v1/jobs", json=_spec("speech"))
    assert await names(teams.alice) == ["default", "vision"]
    assert await names(teams.bob) == ["default", "speech"]
    assert await names(teams.admin) == ["default", "speech", "vision"]
    hidden = await teams.alice.get("/api/v1/virtual-clusters/speech")
    assert hidden.status_code == 404
    assert (
        hidden.json()["detail"] == "no virtual cluster 'speech'; list them with GET /api/v1/virtual-clusters"
    )
    speech = (await teams.bob.get("/api/v1/virtual-clusters/speech")).json()
    assert (speech["pending_jobs"], speech["allowed_groups"]) == (1, ["speech"])
    me = (await teams.alice.get("/api/v1/whoami")).json()
    assert (me["user"], me["groups"], me["virtual_clusters"], me["scopes"]) == (
        "alice", ["vision"], ["default", "vision"], ["read", "submit"]
    )  # fmt: skip
    # A webhook on a VC one may not use is refused as if the VC did not exist.
    hook = {"url": "https://example.com/hook", "event_types": ["corral.job.*"], "virtual_cluster": "speech"}
    refused = await teams.alice.post("/api/v1/webhooks", json=hook)
    assert refused.status_code == 422
    assert "'speech' does not exist" in refused.json()["detail"]
    # Resizing a quota keeps the access list; leaving the group, or deleting it, hides the VC.
    resized = await teams.admin.put("/api/v1/virtual-clusters/vision", json={"quota": {"H100": 2}})
    assert resized.json()["allowed_groups"] == ["vision"]
    assert (await teams.admin.delete("/api/v1/groups/vision/members/alice")).status_code == 204
    assert await names(teams.alice) == ["default"]
    assert (await teams.admin.delete("/api/v1/groups/speech")).status_code == 204
    assert (await teams.admin.get("/api/v1/virtual-clusters/speech")).json()["allowed_groups"] == []
    assert await names(teams.bob) == ["default"], "a list left empty admits admins only"
    opened = await teams.admin.put("/api/v1/virtual-clusters/speech", json={"allowed_groups": None})
    assert opened.json()["allowed_groups"] is None
    assert await names(teams.alice) == ["default", "speech"]


async def test_a_token_does_only_what_its_scopes_and_its_user_allow(teams: Teams) -> None:
    async with _as(teams.admin, await _token(teams.admin, "alice", "read")) as reader:
        assert (await reader.get("/api/v1/jobs")).status_code == 200
        refused = await reader.post("/api/v1/jobs", json=_spec("vision"))
        assert refused.status_code == 403
        assert refused.json()["detail"] == (
            "this token has the scopes read; POST needs a token with the 'submit' scope (create one with"
            " POST /api/v1/tokens)"
        )
        assert (await reader.post("/api/v1/tokens", json={"name": "more"})).status_code == 403
    # A user may not hold admin; a submit token cannot mint more than it has.
    escalate = await teams.alice.post("/api/v1/tokens", json={"name": "x", "scopes": ["admin"]})
    assert escalate.status_code == 403
    assert escalate.json()["detail"] == "user 'alice' may not hold the admin scope (only admins may)"
    async with _as(teams.admin, await _token(teams.admin, "admin", "submit")) as admin_submit:
        minted = await admin_submit.post("/api/v1/tokens", json={"name": "x", "scopes": ["admin"]})
        assert minted.status_code == 403
        assert "cannot make one with admin" in minted.json()["detail"]
        # An admin's token without the admin scope acts as a plain user.
        denied = await admin_submit.get("/api/v1/users")
        assert denied.status_code == 403
        assert "lacks the 'admin' scope" in denied.json()["detail"]
        await teams.bob.post("/api/v1/jobs", json=_spec("speech"))
        assert (await admin_submit.get("/api/v1/jobs")).json()["items"] == []
        assert (await admin_submit.post("/api/v1/jobs", json=_spec("speech"))).status_code == 403
    # Demoting a user disarms their admin tokens.
    assert (
        await teams.admin.post("/api/v1/users", json={"name": "carol", "role": "admin"})
    ).status_code == 201
    async with _as(teams.admin, await _token(teams.admin, "carol", "admin")) as carol:
        assert (await carol.get("/api/v1/users")).status_code == 200
        await teams.admin.patch("/api/v1/users/carol", json={"role": "user"})
        assert (await carol.get("/api/v1/users")).status_code == 403
        assert (await carol.get("/api/v1/whoami")).json()["scopes"] == ["read", "submit"]


async def test_expired_revoked_and_deleted_users_tokens_are_refused(teams: Teams, db: Database) -> None:
    spare = await _token(teams.admin, "alice")
    spare_id = await db.fetchval("SELECT id FROM api.tokens WHERE sha256 = $1", hash_token(spare))
    async with _as(teams.admin, spare) as client:
        assert (await client.get("/api/v1/jobs")).status_code == 200  # verified, and cached
        mine = (await teams.alice.get("/api/v1/tokens")).json()["items"]
        assert [(t["user"], t["active"], "token" in t) for t in mine] == [("alice", True, False)] * 2
        assert spare_id in {t["id"] for t in mine}
        assert (await teams.bob.get("/api/v1/tokens")).json()["items"][0]["user"] == "bob"
        # bob cannot revoke alice's token.
        assert (await teams.bob.delete(f"/api/v1/tokens/{spare_id}")).status_code == 404
        assert (await teams.alice.delete(f"/api/v1/tokens/{spare_id}")).status_code == 204
        revoked = await client.get("/api/v1/jobs")
        assert revoked.status_code == 401
        assert (
            revoked.json()["detail"] == "the bearer token was revoked; create a new one (POST /api/v1/tokens)"
        )
    expiring = await _token(teams.admin, "bob")
    # The API refuses an expiry in the past, so the clock is moved on by hand.
    await db.execute(
        "UPDATE api.tokens SET expires_at = now() - interval '1 second' WHERE sha256 = $1",
        hash_token(expiring),
    )
    async with _as(teams.admin, expiring) as client:
        expired = await client.get("/api/v1/jobs")
        assert expired.status_code == 401
        assert "the bearer token expired at" in expired.json()["detail"]
    assert (await teams.admin.delete("/api/v1/users/bob")).status_code == 204
    assert (await teams.bob.get("/api/v1/jobs")).status_code == 401, "a deleted user's tokens go with them"
    assert (await teams.admin.delete("/api/v1/tokens/tok-admin-bootstrap")).status_code == 409
    everyone = {t["user"] for t in (await teams.admin.get("/api/v1/tokens")).json()["items"]}
    assert everyone == {"admin", "alice"}


async def test_only_admins_reach_admin_endpoints(teams: Teams, db: Database) -> None:
    before = [await _count(db, t) for t in ("api.users", "api.groups", "api.group_members", "api.tokens")]
    for method, path, body in [
        ("GET", "/api/v1/users", None),
        ("POST", "/api/v1/users", {"name": "mallory"}),
        ("GET", "/api/v1/users/bob", None),
        ("PATCH", "/api/v1/users/alice", {"role": "admin"}),
        ("DELETE", "/api/v1/users/bob", None),
        ("GET", "/api/v1/groups", None),
        ("POST", "/api/v1/groups", {"name": "mine"}),
        ("GET", "/api/v1/groups/speech", None),
        ("DELETE", "/api/v1/groups/speech", None),
        ("PUT", "/api/v1/groups/speech/members/alice", None),
        ("DELETE", "/api/v1/groups/vision/members/alice", None),
        ("PUT", "/api/v1/virtual-clusters/speech", {"allowed_groups": ["vision"]}),
        ("GET", "/api/v1/audit", None),
        ("GET", "/api/v1/tokens?user=bob", None),
        ("POST", "/api/v1/tokens", {"name": "for bob", "user": "bob"}),
    ]:
        response = await teams.alice.request(method, path, json=body)
        if path == "/api/v1/tokens?user=bob":  # a user's listing is their own, whatever they ask
            assert {t["user"] for t in response.json()["items"]} == {"alice"}
            continue
        assert response.status_code == 403, (method, path, response.text)
        assert response.json()["detail"].startswith("only an admin may"), response.text
    after = [await _count(db, t) for t in ("api.users", "api.groups", "api.group_members", "api.tokens")]
    assert after == before


async def test_every_mutating_call_is_in_the_audit_log(teams: Teams) -> None:
    job = (await teams.alice.post("/api/v1/jobs", json=_spec("vision"))).json()["id"]
    await teams.alice.post(f"/api/v1/jobs/{job}/cancel")
    await teams.alice.post("/api/v1/jobs", json=_spec("speech"))  # refused: audited too
    await teams.alice.get("/api/v1/jobs")  # a read: not audited
    async with _as(teams.admin, "crl_nonsense") as stranger:
        await stranger.delete("/api/v1/groups/vision")
    page = (await teams.admin.get("/api/v1/audit", params={"limit": 4})).json()
    got = [(e["user"], e["method"], e["route"], e["target"], e["status"], e["client"]) for e in page["items"]]
    assert got == [
        (None, "DELETE", "/api/v1/groups/{name}", "vision", 401, "127.0.0.1"),
        ("alice", "POST", "/api/v1/jobs", None, 403, "127.0.0.1"),
        ("alice", "POST", "/api/v1/jobs/{job_id}/cancel", job, 200, "127.0.0.1"),
        ("alice", "POST", "/api/v1/jobs", job, 201, "127.0.0.1"),
    ]
    assert page["items"][3]["token_id"].startswith("tok-")
    # The fixture's setup is there too, page after page, and nothing twice.
    seen, cursor = [e["id"] for e in page["items"]], page["next_cursor"]
    while cursor:
        page = (await teams.admin.get("/api/v1/audit", params={"limit": 4, "cursor": cursor})).json()
        seen += [e["id"] for e in page["items"]]
        cursor = page["next_cursor"]
    assert len(seen) == len(set(seen)) == 4 + 10  # the fixture's 2 users, groups, members, VCs, tokens
    everything = (await teams.admin.get("/api/v1/audit", params={"limit": 1000})).json()["items"]
    assert [e["route"] for e in reversed(everything[-4:])] == [
        "/api/v1/users", "/api/v1/groups", "/api/v1/groups/{name}/members/{username}",
        "/api/v1/virtual-clusters/{name}",
    ]  # fmt: skip
    by_alice = (await teams.admin.get("/api/v1/audit", params={"user": "alice", "min_status": 400})).json()
    assert [(e["route"], e["status"]) for e in by_alice["items"]] == [("/api/v1/jobs", 403)]
    on_job = (await teams.admin.get("/api/v1/audit", params={"target": job})).json()["items"]
    assert len(on_job) == 2


async def test_a_submit_writes_its_audit_row_with_the_job(
    teams: Teams, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The submit's row goes in the statement that stores the job, so it is there even when
    the middleware's own insert fails (which other calls' rows then miss: logged, the
    answer still goes out)."""

    async def broken(*_args: object) -> None:
        raise ConnectionError("the audit insert failed")

    monkeypatch.setattr(TenantRepository, "record_audit", broken)
    submitted = await teams.alice.post("/api/v1/jobs", json=_spec("vision"))
    assert submitted.status_code == 201, submitted.text
    job = submitted.json()["id"]
    assert (await teams.alice.post(f"/api/v1/jobs/{job}/cancel")).status_code == 200
    rows = await db.fetch("SELECT method, route, status, username FROM api.audit_log WHERE target = $1", job)
    assert [tuple(r) for r in rows] == [("POST", "/api/v1/jobs", 201, "alice")]  # not the cancel's


async def test_bad_tenant_input_is_refused_and_changes_nothing(teams: Teams, db: Database) -> None:
    tables = ("api.users", "api.groups", "api.group_members", "api.tokens", "api.virtual_clusters")
    before = [await _count(db, t) for t in tables]
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    far = (datetime.now(UTC) + timedelta(days=400)).isoformat()
    for method, path, body, status, says in [
        ("POST", "/api/v1/tokens", {"name": "x", "scopes": ["root"]}, 422, "scopes.0"),
        ("POST", "/api/v1/tokens", {"name": "x", "scopes": []}, 422, "scopes"),
        ("POST", "/api/v1/tokens", {"name": "x", "expires_at": past}, 422, "is in the past"),
        ("POST", "/api/v1/tokens", {"name": "x", "expires_at": far}, 422, "a year at most"),
        ("POST", "/api/v1/tokens", {"name": "x", "expires_at": "2030-01-01T00:00:00"}, 422, "timezone"),
        ("POST", "/api/v1/tokens", {"name": "x\u0000y"}, 422, "name"),
        ("POST", "/api/v1/tokens", {"name": "x", "user": "nobody"}, 404, "no user named 'nobody'"),
        ("POST", "/api/v1/users", {"name": "alice"}, 409, "already exists"),
        ("POST", "/api/v1/users", {"name": "Alice Smith"}, 422, "name"),
        ("POST", "/api/v1/users", {"name": "eve", "role": "root"}, 422, "role"),
        ("POST", "/api/v1/groups", {"name": "../etc"}, 422, "name"),
        ("POST", "/api/v1/groups", {"name": "vision"}, 409, "already exists"),
        ("POST", "/api/v1/groups", {"name": "ok", "extra": 1}, 422, "unknown field"),
        ("PUT", "/api/v1/groups/vision/members/nobody", None, 404, "no user named 'nobody'"),
        ("DELETE", "/api/v1/groups/speech/members/alice", None, 404, "not a member"),
        ("PUT", "/api/v1/virtual-clusters/speech", {"allowed_groups": ["nope"]}, 422, "no group named nope"),
        ("PUT", "/api/v1/virtual-clusters/speech", {"allowed_groups": ["../x"]}, 422, "allowed_groups"),
        ("DELETE", "/api/v1/users/admin", None, 409, "cannot delete yourself"),
        ("DELETE", "/api/v1/tokens/tok-nope", None, 404, "no token"),
        ("GET", "/api/v1/audit?cursor=99999999999999999999", None, 422, "cursor"),
        ("GET", "/api/v1/audit?target=a%00b", None, 422, "target"),
        ("GET", "/api/v1/audit?since=2030-01-01T00:00:00", None, 422, "timezone"),
    ]:
        response = await teams.admin.request(method, path, json=body)
        assert response.status_code == status, (method, path, body, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        assert says in response.text, (says, response.text)
    assert [await _count(db, t) for t in tables] == before
    speech = (await teams.admin.get("/api/v1/virtual-clusters/speech")).json()
    assert speech["allowed_groups"] == ["speech"]


async def test_a_demoted_admins_webhook_no_longer_sees_everything(teams: Teams, db: Database) -> None:
    await teams.admin.post("/api/v1/users", json={"name": "carol", "role": "admin"})
    hook = {"url": "https://example.com/hook", "event_types": ["corral.job.*"]}
    async with _as(teams.admin, await _token(teams.admin, "carol", "admin")) as carol:
        assert (await carol.post("/api/v1/webhooks", json=hook)).status_code == 201

    async def carols() -> list[bool]:  # what the webhook fan-in matches events against
        return [
            r["sees_all"] for r in await db.fetch(WEBHOOK_SQL.enabled_webhooks) if r["username"] == "carol"
        ]

    assert await carols() == [True]
    await teams.admin.patch("/api/v1/users/carol", json={"role": "user"})
    assert await carols() == [False]
    await teams.admin.delete("/api/v1/users/carol")
    assert await carols() == []


def _needs_token(dependant: Dependant) -> bool:
    return any(d.call is current_principal or _needs_token(d) for d in dependant.dependencies)


def _api_routes(routes: list[BaseRoute]) -> list[APIRoute]:
    """Every APIRoute, included routers walked into (FastAPI keeps them as they were given)."""
    found = []
    for route in routes:
        if isinstance(route, APIRoute):
            found.append(route)
        elif (router := getattr(route, "original_router", None)) is not None:
            found += _api_routes(router.routes)
    return found


async def test_every_api_route_needs_a_token(db: Database) -> None:
    app = create_app(db, Health("api", {}), Settings())
    routes = [r for r in _api_routes(app.routes) if r.path.startswith("/api/")]
    assert len(routes) > 40
    # Joining as a node takes a join token instead, in its body (cluster/routes_node_join.py).
    assert [r.path for r in routes if not _needs_token(r.dependant)] == ["/api/v1/nodes/join"]


async def test_audit_rows_past_their_retention_are_deleted_in_batches_and_the_rest_kept(db: Database) -> None:
    """What each API process runs once an hour (CORRAL_API_AUDIT_RETENTION_DAYS)."""
    audit = TenantRepository(db)
    for age_days in (400, 399, 398, 397, 396, 10, 0):
        await db.execute(
            "INSERT INTO api.audit_log (at, username, method, route, status)"
            " VALUES (now() - make_interval(days => $1), 'alice', 'POST', '/api/v1/jobs', 201)",
            age_days,
        )
    assert await audit.forget_old_audit(365 * 86400, batch=2) == 5
    left = await db.fetch("SELECT extract(day FROM now() - at)::int AS days FROM api.audit_log ORDER BY id")
    assert [r["days"] for r in left] == [10, 0]
    assert await audit.forget_old_audit(365 * 86400) == 0
