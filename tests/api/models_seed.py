"""What the models tests share: three users (alice and carol in group vision, bob in
speech), each with an API client of their own, and jobs that "trained" something.

No job runs here: a trained job is submitted through the API, then its end is written
into Postgres as the database's owner, the way the launcher leaves a succeeded job
(``api.jobs.state``) and its kept outputs (``launcher.artifacts``). The launcher's own
writing of those rows is tested in tests/launcher/test_artifacts*.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from shared.db.pool import Database
from shared.ids import new_job_id


@dataclass
class Users:
    admin: httpx.AsyncClient
    alice: httpx.AsyncClient
    bob: httpx.AsyncClient
    carol: httpx.AsyncClient


def as_user(client: httpx.AsyncClient, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=client._transport, base_url=client.base_url, headers={"Authorization": f"Bearer {token}"}
    )


async def token_for(admin: httpx.AsyncClient, user: str, *scopes: str) -> str:
    body = {"name": f"{user}'s", "user": user, "scopes": list(scopes or ("read", "submit"))}
    created = await admin.post("/api/v1/tokens", json=body)
    assert created.status_code == 201, created.text
    return str(created.json()["token"])


@pytest.fixture(name="users")
async def users_fixture(client: httpx.AsyncClient) -> AsyncIterator[Users]:
    for group in ("vision", "speech"):
        assert (await client.post("/api/v1/groups", json={"name": group})).status_code == 201
    for user, group in (("alice", "vision"), ("bob", "speech"), ("carol", "vision")):
        assert (await client.post("/api/v1/users", json={"name": user})).status_code == 201
        assert (await client.put(f"/api/v1/groups/{group}/members/{user}")).status_code == 200
    async with (
        as_user(client, await token_for(client, "alice")) as alice,
        as_user(client, await token_for(client, "bob")) as bob,
        as_user(client, await token_for(client, "carol")) as carol,
    ):
        yield Users(client, alice, bob, carol)


def spec(name: str = "train", inputs: list[dict[str, str]] | None = None) -> dict[str, Any]:
    task = {"name": "main", "command": "true", "resources": {"gpus": 0}}
    return {
        "name": name,
        "tasks": [task],
        "inputs": inputs or [],
        "outputs": [{"name": "model", "path": "model"}, {"name": "metrics", "path": "metrics"}],
    }


async def submit(user: httpx.AsyncClient, inputs: list[dict[str, str]] | None = None) -> str:
    submitted = await user.post("/api/v1/jobs", json=spec(inputs=inputs))
    assert submitted.status_code == 201, submitted.text
    return str(submitted.json()["id"])


async def succeed(db: Database, job_id: str, outputs: dict[str, dict[str, bytes]]) -> dict[str, str]:
    """End the job SUCCEEDED with these outputs kept (output → file path → content), as
    the launcher does; returns each output's artifact id."""
    await db.execute(
        "UPDATE api.jobs SET state = 'SUCCEEDED', exit_code = 0, finished_at = now() WHERE id = $1", job_id
    )
    ids = {}
    for output, files in outputs.items():
        manifest = [
            {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for path, data in sorted(files.items())
        ]
        canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
        artifact_id = "art-" + new_job_id().removeprefix("job-")
        await db.execute(
            "INSERT INTO launcher.artifacts (id, job_id, output, manifest, files, size_bytes, sha256)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7)",
            artifact_id,
            job_id,
            output,
            manifest,
            len(manifest),
            sum(len(data) for data in files.values()),
            hashlib.sha256(canonical).hexdigest(),
        )
        ids[output] = artifact_id
    return ids


async def trained(db: Database, user: httpx.AsyncClient, inputs: list[dict[str, str]] | None = None) -> str:
    """A job of ``user``'s that succeeded and kept a model (two files) and empty metrics."""
    job_id = await submit(user, inputs)
    await succeed(db, job_id, {"model": {"weights.bin": b"\x00" * 64, "config.json": b"{}"}, "metrics": {}})
    return job_id


async def count(db: Database, table: str) -> int:
    return int(await db.fetchval(f"SELECT count(*) FROM {table}"))  # noqa: S608  # fixed names, a test
