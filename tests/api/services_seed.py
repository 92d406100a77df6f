"""What the services tests share: a service spec, users with clients of their own, and
replicas brought to a state by writing Postgres as the scheduler and the launcher would
(no node runs here; the restarts themselves are tests/launcher/test_service_restarts.py)."""

from __future__ import annotations

from typing import Any

import httpx

from shared.db.pool import Database
from shared.ids import new_attempt_id
from tests.api.models_seed import as_user, token_for


def service_spec(name: str = "echo", replicas: int = 2, **service: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "service",
        "tasks": [{"name": "main", "command": "python serve.py", "ports": {"http": 1}}],
        "service": {"replicas": replicas, "port": "http", "drain_s": 0.0, **service},
    }


async def user_client(admin: httpx.AsyncClient, user: str, *scopes: str) -> httpx.AsyncClient:
    """A client for ``user`` (created if new), with a token of ``scopes`` (read, submit)."""
    known = await admin.get(f"/api/v1/users/{user}")
    if known.status_code == 404:
        assert (await admin.post("/api/v1/users", json={"name": user})).status_code == 201
    return as_user(admin, await token_for(admin, user, *scopes))


async def counts(db: Database) -> tuple[int, int, int]:
    """(services, replicas, jobs) stored."""
    row = await db.fetchrow(
        "SELECT (SELECT count(*) FROM api.services), (SELECT count(*) FROM api.service_replicas),"
        " (SELECT count(*) FROM api.jobs)"
    )
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


async def replica_jobs(db: Database, service: str) -> list[dict[str, Any]]:
    rows = await db.fetch(
        "SELECT r.job_id, r.revision, r.draining_at IS NOT NULL AS draining, j.state,"
        " j.cancel_requested_at IS NOT NULL AS cancel_requested, j.spec"
        " FROM api.service_replicas r JOIN api.jobs j ON j.id = r.job_id"
        " WHERE r.service = $1 ORDER BY r.created_at, r.job_id",
        service,
    )
    return [dict(row) for row in rows]


async def running(db: Database, job_id: str, *, ready: bool, node: str = "n1") -> str:
    """The replica's job RUNNING with one RUNNING attempt on ``node`` (ready or not)."""
    await db.execute(
        "INSERT INTO monitor.nodes (id, hostname, simulated, state, gpu_count, last_heartbeat)"
        " VALUES ($1, $1, true, 'READY', 8, now()) ON CONFLICT (id) DO NOTHING",
        node,
    )
    await db.execute(
        "UPDATE api.jobs SET state = 'RUNNING', generation = generation + 1 WHERE id = $1", job_id
    )
    attempt_id = new_attempt_id()
    await db.execute(
        "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no,"
        " node_id, gpu_indices, state, host, ports, started_at, ready, ready_detail)"
        " SELECT $1, $2, generation, 'main', 0, 1, $3, '{}', 'RUNNING', '127.0.0.1',"
        " '{\"http\": [18080]}', now(), $4, $5 FROM api.jobs WHERE id = $2",
        attempt_id,
        job_id,
        node,
        ready,
        "GET /: 200" if ready else "GET /: connection refused",
    )
    return attempt_id


async def set_ready(db: Database, job_id: str, ready: bool) -> None:
    await db.execute("UPDATE launcher.attempts SET ready = $2 WHERE job_id = $1", job_id, ready)


async def ended(db: Database, job_id: str, state: str = "CANCELLED") -> None:
    """The job ended as the launcher ends it (its attempts too)."""
    await db.execute(
        "UPDATE launcher.attempts SET state = 'EXITED', finished_at = now() WHERE job_id = $1", job_id
    )
    await db.execute(
        "UPDATE api.jobs SET state = $2, finished_at = now(), reason = 'stopped' WHERE id = $1", job_id, state
    )
