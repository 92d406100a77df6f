"""``/api/v1/services``: create, list, show, scale, a new spec, delete; a duplicate name
(409), specs that are not a service (422), and someone else's service (404). No
controller runs here (tests/api/test_services_controller.py): these are the routes'
promises about the service's row and its status."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from shared.db.pool import Database
from tests.api.services_seed import counts, service_spec, user_client


async def test_a_service_is_created_listed_and_shown_with_a_status_that_says_why(
    client: httpx.AsyncClient, db: Database
) -> None:
    created = await client.post("/api/v1/services", json=service_spec(replicas=2))
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["name"] == "echo"
    assert body["revision"] == 1
    assert (body["replicas"], body["ready"]) == (2, 0)
    assert body["endpoint"] == "/serve/echo/"
    assert body["public"] is False
    assert body["state"] == "Unavailable"
    assert body["reason"] == "0 of 2 replicas ready; no replica exists yet"
    assert body["replica_list"] == []
    assert body["requests_per_s"] is None
    listed = (await client.get("/api/v1/services")).json()["items"]
    assert [s["name"] for s in listed] == ["echo"]
    shown = (await client.get("/api/v1/services/echo")).json()
    assert shown["owner"] == "admin"
    spec = (await client.get("/api/v1/services/echo/spec")).json()
    assert spec["kind"] == "service"
    assert spec["service"]["replicas"] == 2
    assert await counts(db) == (1, 0, 0)  # replicas are the controller's to create


async def test_a_yaml_spec_is_taken_too(client: httpx.AsyncClient) -> None:
    yaml = (
        "name: yamly\nkind: service\ntasks:\n  - name: main\n    command: python serve.py\n"
        "    ports: {http: 1}\nservice:\n  replicas: 1\n  port: http\n  public: true\n"
    )
    created = await client.post(
        "/api/v1/services", content=yaml, headers={"Content-Type": "application/yaml"}
    )
    assert created.status_code == 201, created.text
    assert created.json()["public"] is True


async def test_a_taken_name_is_a_409_and_changes_nothing(client: httpx.AsyncClient, db: Database) -> None:
    assert (await client.post("/api/v1/services", json=service_spec(replicas=1))).status_code == 201
    again = await client.post("/api/v1/services", json=service_spec(replicas=5))
    assert again.status_code == 409
    assert "a service named 'echo' exists" in again.json()["detail"]
    assert (await client.get("/api/v1/services/echo")).json()["replicas"] == 1
    assert await counts(db) == (1, 0, 0)


BAD: list[tuple[dict[str, Any], str]] = [
    ({**service_spec(), "kind": "batch", "service": None}, "kind: a service's spec has kind: service"),
    ({k: v for k, v in service_spec().items() if k != "service"}, "needs service"),
    (service_spec(port="grpc"), "service port 'grpc' is not a port label of role main"),
    (service_spec(replicas=65), "service.replicas"),
    ({**service_spec(), "inputs": [{"model": "nope@1"}]}, "inputs[0]: "),
    (
        {**service_spec(), "tasks": [{"name": "main", "command": "x", "instances": 2, "ports": {"http": 1}}]},
        "one task role of one instance",
    ),
    (  # room for 255 of its own, none for the two each replica gets
        {
            **service_spec(),
            "tasks": [
                {
                    "name": "main",
                    "command": "x",
                    "ports": {"http": 1},
                    "env": {f"V{i}": "x" for i in range(255)},
                }
            ],
        },
        "and would be invalid: tasks.0.env: Value error, at most 256 environment variables",
    ),
]


@pytest.mark.parametrize(("spec", "said"), BAD)
async def test_a_spec_that_is_not_a_service_is_a_422_that_says_what_and_stores_nothing(
    client: httpx.AsyncClient, db: Database, spec: dict[str, Any], said: str
) -> None:
    refused = await client.post("/api/v1/services", json=spec)
    assert refused.status_code == 422, refused.text
    assert said in refused.text
    assert await counts(db) == (0, 0, 0)


async def test_a_service_spec_sent_as_a_job_is_pointed_at_the_services_endpoint(
    client: httpx.AsyncClient, db: Database
) -> None:
    refused = await client.post("/api/v1/jobs", json=service_spec())
    assert refused.status_code == 422
    assert "POST /api/v1/services" in refused.json()["detail"]
    assert "corral service create" in refused.json()["detail"]
    assert await counts(db) == (0, 0, 0)


async def test_scale_sets_the_count_and_keeps_the_revision(client: httpx.AsyncClient) -> None:
    await client.post("/api/v1/services", json=service_spec(replicas=2))
    scaled = await client.post("/api/v1/services/echo/scale", json={"replicas": 0})
    assert scaled.status_code == 200, scaled.text
    assert (scaled.json()["replicas"], scaled.json()["revision"]) == (0, 1)
    assert scaled.json()["state"] == "ScaledToZero"
    assert (await client.get("/api/v1/services/echo/spec")).json()["service"]["replicas"] == 0
    for bad in ({"replicas": -1}, {"replicas": 65}, {"replicas": "3"}, {}):
        refused = await client.post("/api/v1/services/echo/scale", json=bad)
        assert refused.status_code == 422, bad
    assert (await client.get("/api/v1/services/echo")).json()["replicas"] == 0


async def test_a_new_spec_is_a_new_revision_of_the_same_service(client: httpx.AsyncClient) -> None:
    await client.post("/api/v1/services", json=service_spec(replicas=2))
    changed = service_spec(replicas=3)
    changed["tasks"][0]["command"] = "python serve.py --v2"
    updated = await client.put("/api/v1/services/echo/spec", json=changed)
    assert updated.status_code == 200, updated.text
    assert (updated.json()["revision"], updated.json()["replicas"]) == (2, 3)
    template = (await client.get("/api/v1/services/echo/spec")).json()
    assert template["tasks"][0]["command"] == "python serve.py --v2"
    renamed = await client.put("/api/v1/services/echo/spec", json=service_spec(name="other"))
    assert renamed.status_code == 422
    assert "a service keeps its name" in renamed.json()["detail"]
    batch = await client.put(
        "/api/v1/services/echo/spec", json={"name": "echo", "tasks": [{"name": "main", "command": "x"}]}
    )
    assert batch.status_code == 422
    assert (await client.get("/api/v1/services/echo")).json()["revision"] == 2


async def test_a_service_without_replicas_is_deleted_at_once(client: httpx.AsyncClient, db: Database) -> None:
    await client.post("/api/v1/services", json=service_spec(replicas=2))
    deleted = await client.delete("/api/v1/services/echo")
    assert deleted.status_code == 202, deleted.text
    assert (deleted.json()["state"], deleted.json()["reason"]) == (
        "Unavailable",
        "deleted: no replica was left to stop",
    )
    assert (await client.get("/api/v1/services/echo")).status_code == 404
    assert (await client.delete("/api/v1/services/echo")).status_code == 404
    assert await counts(db) == (0, 0, 0)
    # The name is free again.
    assert (await client.post("/api/v1/services", json=service_spec(replicas=1))).status_code == 201


async def test_someone_elses_service_is_not_found_and_left_alone(client: httpx.AsyncClient) -> None:
    async with await user_client(client, "alice") as alice, await user_client(client, "bob") as bob:
        assert (await alice.post("/api/v1/services", json=service_spec(replicas=1))).status_code == 201
        for response in (
            await bob.get("/api/v1/services/echo"),
            await bob.get("/api/v1/services/echo/spec"),
            await bob.post("/api/v1/services/echo/scale", json={"replicas": 5}),
            await bob.put("/api/v1/services/echo/spec", json=service_spec(replicas=5)),
            await bob.delete("/api/v1/services/echo"),
        ):
            assert response.status_code == 404, response.text
            assert "no service named 'echo'" in response.json()["detail"]
        assert (await bob.get("/api/v1/services")).json()["items"] == []
        mine = (await alice.get("/api/v1/services/echo")).json()
        assert (mine["owner"], mine["replicas"], mine["revision"], mine["state"]) == (
            "alice",
            1,
            1,
            "Unavailable",
        )
        admin_sees = (await client.get("/api/v1/services")).json()["items"]
        assert [s["owner"] for s in admin_sees] == ["alice"]


async def test_a_read_only_token_may_look_but_not_create(client: httpx.AsyncClient, db: Database) -> None:
    async with await user_client(client, "carol", "read") as reader:
        refused = await reader.post("/api/v1/services", json=service_spec())
        assert refused.status_code == 403
        assert "'submit' scope" in refused.json()["detail"]
        assert (await reader.get("/api/v1/services")).status_code == 200
    assert await counts(db) == (0, 0, 0)


async def test_a_vc_the_user_may_not_use_is_a_403(client: httpx.AsyncClient, db: Database) -> None:
    assert (await client.post("/api/v1/groups", json={"name": "vision"})).status_code == 201
    made = await client.put("/api/v1/virtual-clusters/vision", json={"allowed_groups": ["vision"]})
    assert made.status_code in (200, 201), made.text
    async with await user_client(client, "dave") as dave:
        refused = await dave.post("/api/v1/services", json={**service_spec(), "virtual_cluster": "vision"})
        assert refused.status_code == 403
        assert "virtual cluster 'vision'" in refused.json()["detail"]
    assert await counts(db) == (0, 0, 0)
