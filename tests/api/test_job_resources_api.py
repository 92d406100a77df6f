"""The job list (filters, cursor pages) and a job's sub-resources (tags, resubmit,
attempts, events) over HTTP on a real database (events: real NATS), with the tenancy
rules: a user sees and acts on their own jobs only (404 for others'), admins on all."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from services.api.tenants.auth import hash_token, upsert_token
from services.api.tenants.repository import TenantRepository
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.events import JobRunning, JobSucceeded, TaskExited, TaskStarted
from shared.events.jobs import JobEndedData, JobRunningData, TaskExitedData, TaskStartedData
from tests.api.test_events_api import publish, submitted
from tests.fixtures.api import Api

ALICE = {"Authorization": "Bearer crl_alice"}


def _job(name: str, vc: str = "default", **extra: Any) -> dict[str, Any]:
    return {"name": name, "virtual_cluster": vc, "tasks": [{"name": "main", "command": "true"}], **extra}


@pytest.fixture
async def alice(db: Database) -> None:
    await upsert_token(TenantRepository(db), "tok-alice", "alice", hash_token("crl_alice"), "user", "alice")


@pytest.mark.usefixtures("alice")
async def test_the_list_filters_and_pages_with_a_cursor(client: httpx.AsyncClient, db: Database) -> None:
    await client.put("/api/v1/virtual-clusters/vision", json={"quota": {}})
    ids = [
        (await client.post("/api/v1/jobs", json=_job(f"j{n}", "vision" if n % 2 else "default"))).json()["id"]
        for n in range(7)
    ]
    theirs = (await client.post("/api/v1/jobs", json=_job("mine"), headers=ALICE)).json()["id"]
    await client.post(f"/api/v1/jobs/{ids[0]}/cancel")

    pages: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 3, "user": "admin"} | ({"cursor": cursor} if cursor else {})
        page = (await client.get("/api/v1/jobs", params=params)).json()
        pages += [job["id"] for job in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == ids[::-1]  # newest first, each once
    vision = (await client.get("/api/v1/jobs", params={"virtual_cluster": "vision"})).json()["items"]
    assert [j["id"] for j in vision] == [ids[5], ids[3], ids[1]]
    cancelled = (await client.get("/api/v1/jobs", params={"state": ["CANCELLED", "FAILED"]})).json()
    assert [j["id"] for j in cancelled["items"]] == [ids[0]]
    by_name = (await client.get("/api/v1/jobs", params={"name": "j4"})).json()["items"]
    assert [j["id"] for j in by_name] == [ids[4]]
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert (await client.get("/api/v1/jobs", params={"since": future})).json()["items"] == []
    assert len((await client.get("/api/v1/jobs", params={"until": future})).json()["items"]) == 8
    # A user sees their own jobs only, whatever they ask for.
    own = (await client.get("/api/v1/jobs", headers=ALICE)).json()["items"]
    assert [j["id"] for j in own] == [theirs]
    assert (await client.get("/api/v1/jobs", params={"user": "admin"}, headers=ALICE)).json()["items"] == []


@pytest.mark.parametrize(
    "params",
    [
        {"cursor": "bm90IGEgY3Vyc29y"},
        {"cursor": "!!"},
        {"state": "NOPE"},
        {"tag": "../x"},
        {"user": "Robert'); DROP TABLE"},
        {"since": "yesterday"},
        {"since": "2026-01-01T00:00:00"},  # no timezone
        {"limit": 0},
        {"name": "a\x00b"},
    ],
)
async def test_bad_list_filters_are_422_problems(client: httpx.AsyncClient, params: dict[str, Any]) -> None:
    response = await client.get("/api/v1/jobs", params=params)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.usefixtures("alice")
async def test_tags_replace_filter_and_stay_with_their_owner(client: httpx.AsyncClient, db: Database) -> None:
    job = (await client.post("/api/v1/jobs", json=_job("tagged"), headers=ALICE)).json()["id"]
    other = (await client.post("/api/v1/jobs", json=_job("untagged"), headers=ALICE)).json()["id"]
    put = await client.put(
        f"/api/v1/jobs/{job}/tags", json={"tags": ["team:vision", "lr=0.1", "team:vision"]}, headers=ALICE
    )
    assert put.status_code == 200
    assert put.json() == {"tags": ["lr=0.1", "team:vision"]}
    assert (await client.get(f"/api/v1/jobs/{job}", headers=ALICE)).json()["tags"] == [
        "lr=0.1",
        "team:vision",
    ]
    found = (
        await client.get("/api/v1/jobs", params={"tag": ["team:vision", "lr=0.1"]}, headers=ALICE)
    ).json()
    assert [j["id"] for j in found["items"]] == [job]
    assert (await client.get("/api/v1/jobs", params={"tag": ["team:vision", "x"]})).json()["items"] == []
    # Replace, then clear.
    await client.put(f"/api/v1/jobs/{job}/tags", json={"tags": ["baseline"]}, headers=ALICE)
    assert [
        j["id"] for j in (await client.get("/api/v1/jobs", params={"tag": "baseline"})).json()["items"]
    ] == [job]
    assert (await client.put(f"/api/v1/jobs/{job}/tags", json={"tags": []}, headers=ALICE)).json() == {
        "tags": []
    }
    assert other
    # Bad tags change nothing; someone else's job is not found.
    await client.put(f"/api/v1/jobs/{job}/tags", json={"tags": ["keep"]}, headers=ALICE)
    for bad in ({"tags": ["../x"]}, {"tags": ["a b"]}, {"tags": ["x"] * 33}, {"tags": "x"}, {}):
        response = await client.put(f"/api/v1/jobs/{job}/tags", json=bad, headers=ALICE)
        assert response.status_code == 422, bad
    assert await db.fetchval("SELECT tags FROM api.jobs WHERE id = $1", job) == ["keep"]
    admins = (await client.post("/api/v1/jobs", json=_job("admins"))).json()["id"]
    assert (
        await client.put(f"/api/v1/jobs/{admins}/tags", json={"tags": ["x"]}, headers=ALICE)
    ).status_code == 404


@pytest.mark.usefixtures("alice")
async def test_resubmit_makes_a_new_job_for_the_caller_with_the_same_spec(
    client: httpx.AsyncClient, db: Database
) -> None:
    openpai = (
        "protocolVersion: 2\nname: again\ntype: job\nsecrets: {key: s3cret}\n"
        "prerequisites: [{name: img, type: dockerimage, uri: 'python:3.12'}]\n"
        "taskRoles:\n  main:\n    dockerImage: img\n"
        "    resourcePerInstance: {gpu: 0, cpu: 1, memoryMB: 512}\n"
        "    commands: ['echo <% $secrets.key %>']\n"
    )
    first = await client.post("/api/v1/jobs", content=openpai, headers={**ALICE, "content-type": "text/yaml"})
    old = first.json()["id"]
    await client.put(f"/api/v1/jobs/{old}/tags", json={"tags": ["run-1"]}, headers=ALICE)
    await client.post(f"/api/v1/jobs/{old}/cancel", headers=ALICE)
    again = await client.post(f"/api/v1/jobs/{old}/resubmit", headers=ALICE)
    assert again.status_code == 201, again.text
    new = again.json()
    assert new["id"] != old
    assert (new["user"], new["state"], new["tags"]) == ("alice", "PENDING", ["run-1"])
    assert new["spec"] == first.json()["spec"]
    secrets = await db.fetch("SELECT job_id, value FROM api.job_secrets ORDER BY job_id")
    assert {r["job_id"] for r in secrets} == {old, new["id"]}
    assert "s3cret" not in again.text
    assert (await client.get(f"/api/v1/jobs/{old}", headers=ALICE)).json()["state"] == "CANCELLED"
    # An admin resubmitting alice's job makes the admin's job; alice cannot resubmit the admin's.
    mine = (await client.post(f"/api/v1/jobs/{old}/resubmit")).json()
    assert mine["user"] == "admin"
    assert (await client.post(f"/api/v1/jobs/{mine['id']}/resubmit", headers=ALICE)).status_code == 404
    assert (await client.post("/api/v1/jobs/job-nope/resubmit")).status_code == 404


@pytest.mark.usefixtures("alice")
async def test_attempts_list_every_attempt_of_a_visible_job(client: httpx.AsyncClient, db: Database) -> None:
    job = (await client.post("/api/v1/jobs", json=_job("tries"), headers=ALICE)).json()["id"]
    assert (await client.get(f"/api/v1/jobs/{job}/attempts", headers=ALICE)).json() == {"items": []}
    for n in (1, 2):
        await db.execute(
            "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no,"
            " node_id, gpu_indices, state, exit_code)"
            " VALUES ($1, $2, $3, 'main', 0, $3, 'n0', '{0}', 'EXITED', $4)",
            f"att-{n}",
            job,
            n,
            1 if n == 1 else 0,
        )
    items = (await client.get(f"/api/v1/jobs/{job}/attempts", headers=ALICE)).json()["items"]
    assert [(a["id"], a["attempt_no"], a["exit_code"]) for a in items] == [("att-1", 1, 1), ("att-2", 2, 0)]
    admins = (await client.post("/api/v1/jobs", json=_job("admins"))).json()["id"]
    assert (await client.get(f"/api/v1/jobs/{admins}/attempts", headers=ALICE)).status_code == 404


async def test_a_jobs_events_come_back_from_jetstream_in_order(api: Api, db: Database, bus: NatsBus) -> None:
    async with httpx.AsyncClient(base_url=api.url, headers={"Authorization": f"Bearer {api.alice}"}) as http:
        job = (await http.post("/api/v1/jobs", json=_job("watched"))).json()["id"]
        other = (await http.post("/api/v1/jobs", json=_job("other"))).json()["id"]
        await db.execute(
            "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no,"
            " node_id, gpu_indices, state) VALUES ('att-w', $1, 1, 'main', 0, 1, 'n0', '{0}', 'EXITED')",
            job,
        )
        start = TaskStartedData(attempt_id="att-w", job_id=job, node_id="n0", pid=7)
        exited = TaskExitedData(attempt_id="att-w", job_id=job, node_id="n0", exit_code=0)
        noise = TaskStartedData(attempt_id="att-o", job_id=other, node_id="n0", pid=8)
        await publish(
            bus,
            submitted(job, "alice"),
            submitted(other, "alice"),
            JobRunning(source="t", subject=job, data=JobRunningData(job_id=job, generation=1)),
            TaskStarted(source="t", subject="att-w", data=start),
            TaskStarted(source="t", subject="att-o", data=noise),
            TaskExited(source="t", subject="att-w", data=exited),
            JobSucceeded(source="t", subject=job, data=JobEndedData(job_id=job, generation=1)),
        )
        answer = await http.get(f"/api/v1/jobs/{job}/events")
        assert answer.status_code == 200, answer.text
        types = [e["type"] for e in answer.json()["items"]]
        assert types == [
            "corral.job.submitted.v1",
            "corral.job.running.v1",
            "corral.task.started.v1",
            "corral.task.exited.v1",
            "corral.job.succeeded.v1",
        ]
        assert answer.json()["truncated"] is False
        assert all(e["data"]["job_id"] == job for e in answer.json()["items"])
        limited = (await http.get(f"/api/v1/jobs/{job}/events", params={"limit": 2})).json()
        assert (len(limited["items"]), limited["truncated"]) == (2, True)
    async with httpx.AsyncClient(base_url=api.url, headers={"Authorization": f"Bearer {api.admin}"}) as http:
        admins = (await http.post("/api/v1/jobs", json=_job("admins"))).json()["id"]
    async with httpx.AsyncClient(base_url=api.url, headers={"Authorization": f"Bearer {api.alice}"}) as http:
        assert (await http.get(f"/api/v1/jobs/{admins}/events")).status_code == 404
