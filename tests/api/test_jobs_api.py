"""Submitting and reading jobs through the HTTP API; bad input never reaches the database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.api.problems import PRIVILEGE_FIELDS, PRIVILEGE_MESSAGE
from services.api.tenants.auth import load_or_create_admin_token
from shared.db.pool import Database
from shared.events import JobSubmitted, parse_event

HELLO: dict[str, Any] = {
    "name": "hello",
    "tasks": [{"name": "main", "instances": 1, "command": "echo hello", "resources": {"gpus": 1}}],
}


async def _counts(db: Database) -> tuple[int, int]:
    row = await db.fetchrow(
        "SELECT (SELECT count(*) FROM api.jobs) AS jobs, (SELECT count(*) FROM corral.outbox) AS events"
    )
    assert row is not None
    return row["jobs"], row["events"]


async def test_submit_answers_201_with_id_and_pending_state_and_records_the_event(
    client: httpx.AsyncClient, db: Database
) -> None:
    response = await client.post("/api/v1/jobs", json=HELLO)
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["id"].startswith("job-")
    assert body["state"] == "PENDING"
    assert body["spec"]["tasks"][0]["command"] == "echo hello"

    [outbox] = await db.fetch("SELECT subject, aggregate, payload FROM corral.outbox")
    event = parse_event(bytes(outbox["payload"]))
    assert isinstance(event, JobSubmitted)
    assert event.data.job_id == body["id"]
    assert outbox["subject"] == f"corral.job.submitted.{body['id']}"

    fetched = await client.get(f"/api/v1/jobs/{body['id']}")
    assert fetched.status_code == 200
    assert fetched.json()["state"] == "PENDING"
    assert fetched.json()["attempts"] == []
    listed = await client.get("/api/v1/jobs", params={"state": "PENDING"})
    assert [job["id"] for job in listed.json()["items"]] == [body["id"]]


def _with(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(json.dumps(HELLO))
    for path, value in changes.items():
        target: Any = spec
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[int(key)] if key.isdigit() else target[key]
        target[keys[-1]] = value
    return spec


BAD_SPECS = [
    pytest.param(_with(tasks__0__resources__gpus=-1), "tasks.0.resources.gpus", id="negative-gpus"),
    pytest.param(_with(tasks__0__resources__gpus=100000), "tasks.0.resources.gpus", id="absurd-gpus"),
    pytest.param(_with(tasks__0__instances=0), "tasks.0.instances", id="zero-instances"),
    pytest.param(_with(tasks__0__resources__gpus="two"), "tasks.0.resources.gpus", id="wrong-type"),
    pytest.param(_with(colour="blue"), "colour", id="unknown-field"),
    pytest.param(_with(tasks__0__resources__gpu=1), "tasks.0.resources.gpu", id="misspelt-field"),
    pytest.param(_with(name="../etc/passwd"), "name", id="path-in-name"),
    pytest.param(
        _with(outputs=[{"name": "model", "path": "../../etc"}]), "outputs.0.path", id="output-escapes"
    ),
    pytest.param(_with(outputs=[{"name": "model", "path": "/etc"}]), "outputs.0.path", id="output-absolute"),
    pytest.param(_with(name="a" * 200), "name", id="long-name"),
    pytest.param(_with(tasks__0__command="   "), "tasks.0.command", id="blank-command"),
    pytest.param(_with(tasks=[]), "tasks", id="no-tasks"),
    pytest.param(_with(tasks__0__env={"1BAD": "x"}), "tasks.0.env", id="bad-env-name"),
    pytest.param({"tasks": HELLO["tasks"]}, "name", id="missing-name"),
    pytest.param(_with(tasks=[HELLO["tasks"][0], HELLO["tasks"][0]]), "body", id="duplicate-role"),
    pytest.param([1, 2, 3], "body", id="not-an-object"),
]


PRIVILEGE_ASKS = [
    pytest.param(_with(tasks__0__uid=0), "tasks.0.uid", id="uid"),
    pytest.param(_with(tasks__0__privileged=True), "tasks.0.privileged", id="privileged"),
    pytest.param(_with(tasks__0__capabilities=["SYS_ADMIN"]), "tasks.0.capabilities", id="capability"),
    pytest.param(_with(tasks__0__mounts=[{"source": "/", "target": "/host"}]), "tasks.0.mounts", id="mount"),
    pytest.param(
        _with(tasks__0__resources__devices=["/dev/nvidia0"]), "tasks.0.resources.devices", id="device"
    ),
    pytest.param(
        _with(tasks__0__securityContext={"runAsUser": 0}), "tasks.0.securityContext", id="k8s-style"
    ),
]


@pytest.mark.parametrize(("spec", "field"), BAD_SPECS + PRIVILEGE_ASKS)
async def test_bad_specs_get_a_problem_naming_the_field_and_change_nothing(
    client: httpx.AsyncClient, db: Database, spec: Any, field: str
) -> None:
    response = await client.post("/api/v1/jobs", json=spec)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"].endswith("/invalid-input")
    assert problem["status"] == 422
    assert field in problem["detail"]
    assert any(error["field"] == field for error in problem["errors"])
    if field.rsplit(".", 1)[-1] in PRIVILEGE_FIELDS:  # a uid, capability, mount, device: why not
        assert [e["message"] for e in problem["errors"]] == [PRIVILEGE_MESSAGE]
    assert await _counts(db) == (0, 0)


@pytest.mark.parametrize(
    "body",
    [b"{not json", b'{"name": "hello",', b"\x00\x01\x02", b""],
    ids=["garbage", "truncated", "binary", "empty"],
)
async def test_malformed_json_is_a_400_problem(client: httpx.AsyncClient, db: Database, body: bytes) -> None:
    response = await client.post("/api/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert response.status_code in (400, 422), response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["detail"]
    assert await _counts(db) == (0, 0)


async def test_garbage_json_names_the_problem(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/api/v1/jobs", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["type"].endswith("/malformed-json")
    assert "not valid JSON" in response.json()["detail"]


async def test_a_body_that_is_not_sent_as_json_is_a_415(client: httpx.AsyncClient, db: Database) -> None:
    # What `curl -d '{...}'` does without -H 'Content-Type: application/json'.
    response = await client.post(
        "/api/v1/jobs",
        content=json.dumps(HELLO),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 415
    assert "Content-Type: application/json" in response.json()["detail"]
    assert await _counts(db) == (0, 0)


async def test_a_huge_body_is_refused_before_it_is_read(client: httpx.AsyncClient, db: Database) -> None:
    spec = _with(tasks__0__command="x" * 100_000)
    response = await client.post("/api/v1/jobs", json=spec)
    assert response.status_code == 413
    assert "at most 65536 bytes" in response.json()["detail"]
    assert await _counts(db) == (0, 0)


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}],
    ids=["none", "unknown-token", "wrong-scheme"],
)
async def test_requests_without_a_valid_token_are_401(
    client: httpx.AsyncClient, db: Database, headers: dict[str, str]
) -> None:
    client.headers.pop("Authorization")
    response = await client.post("/api/v1/jobs", json=HELLO, headers=headers)
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert "token" in response.json()["detail"]
    assert await _counts(db) == (0, 0)


async def test_unknown_job_and_missing_logs_are_404_problems(client: httpx.AsyncClient) -> None:
    missing = await client.get("/api/v1/jobs/job-nope")
    assert missing.status_code == 404
    assert "no job with id" in missing.json()["detail"]
    job = (await client.post("/api/v1/jobs", json=HELLO)).json()
    logs = await client.get(f"/api/v1/jobs/{job['id']}/logs")
    assert logs.status_code == 404
    assert "has not started" in logs.json()["detail"]
    bad_task = await client.get(f"/api/v1/jobs/{job['id']}/logs", params={"task": "../../etc"})
    assert bad_task.status_code == 404
    assert "<role>-<index>" in bad_task.json()["detail"]
    no_such_task = await client.get(f"/api/v1/jobs/{job['id']}/logs", params={"task": "main-1"})
    assert no_such_task.status_code == 404
    assert no_such_task.json()["detail"] == f"job {job['id']} has no task main-1; its tasks are main-0"
    ranks = {"name": "ddp", "tasks": [{**HELLO["tasks"][0], "name": "worker", "instances": 2}]}
    ddp = (await client.post("/api/v1/jobs", json=ranks)).json()
    beyond = await client.get(f"/api/v1/jobs/{ddp['id']}/logs", params={"task": "worker-2"})
    tasks = "worker-0 … worker-1"
    assert beyond.json()["detail"] == f"job {ddp['id']} has no task worker-2; its tasks are {tasks}"


async def test_unknown_routes_and_methods_are_problems(client: httpx.AsyncClient) -> None:
    assert (await client.get("/api/v1/nothing-here")).headers["content-type"] == "application/problem+json"
    response = await client.delete("/api/v1/jobs")
    assert response.status_code == 405
    assert response.headers["content-type"] == "application/problem+json"


def test_the_admin_token_is_created_once_and_private(tmp_path: Path) -> None:
    path = tmp_path / "home" / "admin-token"
    first = load_or_create_admin_token(path)
    assert first.startswith("crl_")
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_or_create_admin_token(path) == first


def test_api_processes_starting_at_once_all_get_the_same_admin_token(tmp_path: Path) -> None:
    """Eight processes racing to make the token (CORRAL_API_PROCESSES): one makes it, every
    one reads it, and nothing is left beside it."""
    path = tmp_path / "home" / "admin-token"
    script = (
        "import sys, pathlib\n"
        "from services.api.tenants.auth import load_or_create_admin_token\n"
        "print(load_or_create_admin_token(pathlib.Path(sys.argv[1])))\n"
    )
    racers = [
        subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    tokens = {racer.communicate(timeout=60)[0].strip() for racer in racers}
    assert tokens == {path.read_text().strip()}
    assert [p.name for p in path.parent.iterdir()] == ["admin-token"]


async def test_the_token_is_stored_hashed(db: Database, admin_token: str) -> None:
    rows = await db.fetch("SELECT sha256 FROM api.tokens")
    assert rows
    assert all(admin_token not in row["sha256"] for row in rows)


async def test_openapi_has_stable_operation_ids(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    operations = {op["operationId"] for path in spec["paths"].values() for op in path.values()}
    assert {"submitJob", "getJob", "listJobs", "getJobLogs"} <= operations


async def test_a_dry_run_nobody_answers_is_a_503_that_says_so(
    client: httpx.AsyncClient, db: Database
) -> None:
    spec = {"name": "probe", "tasks": [{"name": "main", "command": "true", "resources": {"gpus": 1}}]}
    response = await client.post("/api/v1/jobs/dry-run", json=spec)
    assert response.status_code == 503
    assert response.json()["detail"] == (
        "this API serves no scheduler questions (no message bus); try again later"
    )
    assert await db.fetchval("SELECT count(*) FROM api.jobs") == 0
