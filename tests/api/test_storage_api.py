"""Storage configs through the API: an admin defines them (``/api/v1/storage``), and a
submit that names one that does not exist, or that none of the submitter's groups may
use, is refused with nothing stored. alice is in group vision, bob in none."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from shared.db.pool import Database


@dataclass
class People:
    admin: httpx.AsyncClient
    alice: httpx.AsyncClient
    bob: httpx.AsyncClient


def _as(client: httpx.AsyncClient, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=client._transport, base_url=client.base_url, headers={"Authorization": f"Bearer {token}"}
    )


@pytest.fixture
async def people(client: httpx.AsyncClient) -> AsyncIterator[People]:
    tokens = {}
    for user in ("alice", "bob"):
        assert (await client.post("/api/v1/users", json={"name": user})).status_code == 201
        body = {"name": "t", "user": user, "scopes": ["read", "submit"]}
        tokens[user] = (await client.post("/api/v1/tokens", json=body)).json()["token"]
    assert (await client.post("/api/v1/groups", json={"name": "vision"})).status_code == 201
    assert (await client.put("/api/v1/groups/vision/members/alice")).status_code == 200
    async with _as(client, tokens["alice"]) as alice, _as(client, tokens["bob"]) as bob:
        yield People(client, alice, bob)


def _job(*storage: dict[str, object]) -> dict[str, object]:
    task = {"name": "main", "command": "ls /mnt", "resources": {"gpus": 0}}
    return {"name": "train", "tasks": [task], "storage": list(storage)}


async def _jobs(db: Database) -> int:
    return int(await db.fetchval("SELECT count(*) FROM api.jobs"))


async def test_an_admin_defines_reads_replaces_and_deletes_storage(people: People) -> None:
    admin = people.admin
    body = {"kind": "nfs", "source": "nfs1.example.com:/datasets", "read_only": True, "groups": ["vision"]}
    created = await admin.put("/api/v1/storage/datasets", json=body)
    assert created.status_code == 201, created.text
    view = created.json()
    assert (view["kind"], view["source"], view["read_only"], view["groups"]) == (
        "nfs", "nfs1.example.com:/datasets", True, ["vision"]
    )  # fmt: skip
    assert (view["mount_path"], view["all_users"], view["created_by"]) == ("/mnt/datasets", False, "admin")
    replaced = await admin.put("/api/v1/storage/datasets", json={"kind": "hostpath", "source": "/srv/d"})
    assert replaced.status_code == 200, replaced.text
    assert (replaced.json()["kind"], replaced.json()["groups"], replaced.json()["read_only"]) == (
        "hostpath", [], False
    )  # fmt: skip
    await admin.put(
        "/api/v1/storage/scratch", json={"kind": "hostpath", "source": "/srv/s", "all_users": True}
    )
    listed = (await admin.get("/api/v1/storage")).json()["items"]
    assert [s["name"] for s in listed] == ["datasets", "scratch"]
    assert (await admin.get("/api/v1/storage/scratch")).json()["all_users"] is True
    assert (await admin.delete("/api/v1/storage/scratch")).status_code == 204
    gone = await admin.get("/api/v1/storage/scratch")
    assert gone.status_code == 404
    assert "GET /api/v1/storage" in gone.json()["detail"]
    assert (await admin.delete("/api/v1/storage/scratch")).status_code == 404
    audited = (await admin.get("/api/v1/audit", params={"target": "datasets"})).json()["items"]
    assert [(e["method"], e["status"]) for e in audited] == [("PUT", 200), ("PUT", 201)]


async def test_only_admins_see_or_change_storage(people: People) -> None:
    for call in (
        people.alice.get("/api/v1/storage"),
        people.alice.get("/api/v1/storage/x"),
        people.alice.put("/api/v1/storage/x", json={"kind": "hostpath", "source": "/srv/x"}),
        people.alice.delete("/api/v1/storage/x"),
    ):
        refused = await call
        assert refused.status_code == 403, refused.text
        assert "only an admin may" in refused.json()["detail"]


@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("x", {"kind": "s3", "source": "/srv/x"}, "kind"),
        ("x", {"kind": "hostpath", "source": "srv/x"}, "source"),
        ("x", {"kind": "hostpath", "source": "/srv/../etc"}, "source"),
        ("x", {"kind": "hostpath", "source": "/srv/x:y"}, "source"),
        ("x", {"kind": "nfs", "source": "/export"}, "source"),
        ("x", {"kind": "nfs", "source": "bad host:/export"}, "source"),
        ("x", {"kind": "nfs", "source": "nfs1:export"}, "source"),
        ("x", {"kind": "hostpath", "source": "/srv/x", "groups": ["../g"]}, "groups"),
        ("x", {"kind": "hostpath", "source": "/srv/x", "mode": "rw"}, "mode"),
        ("x", {"source": "/srv/x"}, "kind"),
        ("Bad_Name", {"kind": "hostpath", "source": "/srv/x"}, "name"),
    ],
)
async def test_bad_storage_input_is_a_422_naming_the_field(
    people: People, db: Database, name: str, body: dict[str, object], field: str
) -> None:
    refused = await people.admin.put(f"/api/v1/storage/{name}", json=body)
    assert refused.status_code == 422, refused.text
    assert field in refused.text
    assert int(await db.fetchval("SELECT count(*) FROM api.storage_configs")) == 0


async def test_a_group_that_does_not_exist_is_refused(people: People, db: Database) -> None:
    body = {"kind": "hostpath", "source": "/srv/x", "groups": ["vision", "nope"]}
    refused = await people.admin.put("/api/v1/storage/x", json=body)
    assert refused.status_code == 422
    assert refused.json()["detail"] == "groups: no group named nope; create it first (POST /api/v1/groups)"
    assert int(await db.fetchval("SELECT count(*) FROM api.storage_configs")) == 0


async def test_a_submit_may_use_only_storage_that_exists_and_its_submitter_may_use(
    people: People, db: Database
) -> None:
    admin = people.admin
    await admin.put(
        "/api/v1/storage/vision-data", json={"kind": "hostpath", "source": "/srv/v", "groups": ["vision"]}
    )
    await admin.put(
        "/api/v1/storage/shared", json={"kind": "hostpath", "source": "/srv/s", "all_users": True}
    )
    assert (await people.alice.post("/api/v1/jobs", json=_job({"name": "vision-data"}))).status_code == 201
    assert (
        await people.bob.post("/api/v1/jobs", json=_job({"name": "shared", "read_only": True}))
    ).status_code == 201
    before = await _jobs(db)
    for who, storage in ((people.bob, "vision-data"), (people.alice, "no-such"), (people.bob, "no-such")):
        for path in ("/api/v1/jobs", "/api/v1/jobs/dry-run"):
            refused = await who.post(path, json=_job({"name": "shared"}, {"name": storage}))
            assert refused.status_code == 403, refused.text
            detail = refused.json()["detail"]
            assert detail.startswith(
                f"storage: you may not use {storage!r}: no such storage config, or none"
            ), detail
            assert "ask an admin to add one of your groups" in detail
    missing = await admin.post("/api/v1/jobs", json=_job({"name": "vision-data"}, {"name": "no-such"}))
    assert missing.status_code == 422, missing.text
    assert missing.json()["detail"].startswith("storage: no storage config named 'no-such'")
    assert await _jobs(db) == before, "a refused job is not stored"
    # Admins may use every config; access follows membership at once.
    assert (await admin.post("/api/v1/jobs", json=_job({"name": "vision-data"}))).status_code == 201
    assert (await admin.put("/api/v1/groups/vision/members/bob")).status_code == 200
    assert (await people.bob.post("/api/v1/jobs", json=_job({"name": "vision-data"}))).status_code == 201


async def test_deleting_a_group_takes_it_off_storage_and_opens_nothing(people: People) -> None:
    admin = people.admin
    await admin.put("/api/v1/storage/v", json={"kind": "hostpath", "source": "/srv/v", "groups": ["vision"]})
    assert (await admin.delete("/api/v1/groups/vision")).status_code == 204
    assert (await admin.get("/api/v1/storage/v")).json()["groups"] == []
    assert (await people.alice.post("/api/v1/jobs", json=_job({"name": "v"}))).status_code == 403
