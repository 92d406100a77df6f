"""Nodes and GPUs through the API: inventory, readings, history, admin drain requests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx

from services.api.tenants.auth import hash_token, upsert_token
from services.api.tenants.repository import TenantRepository
from services.monitor.registration import register_nodes
from services.monitor.repository import HistoryRow, write_history
from shared.db.pool import Database
from shared.events.nodes import GpuSample, NodeTelemetryData


async def _node(db: Database, node_id: str = "gpu-node-1") -> None:
    gpus = [
        GpuSample(
            index=0, uuid="GPU-a", model="Simulated H100", memory_total_mb=81_559, utilization_pct=97.0
        ),
        GpuSample(index=1, uuid="GPU-b", model="Simulated H100", memory_total_mb=81_559, lost=True),
        GpuSample(
            index=2, uuid="GPU-c", model="Simulated H100", memory_total_mb=81_559, unsupported=["power_w"]
        ),
    ]
    data = NodeTelemetryData(node_id=node_id, hostname="h1", simulated=True, interval_s=1.0, gpus=gpus)
    async with db.transaction() as conn:
        await register_nodes(conn, [data])


async def _user_client(client: httpx.AsyncClient, db: Database) -> httpx.AsyncClient:
    await upsert_token(TenantRepository(db), "tok-alice", "alice", hash_token("crl_alice"), "user", "alice")
    return httpx.AsyncClient(
        transport=client._transport, base_url=client.base_url, headers={"Authorization": "Bearer crl_alice"}
    )


async def test_nodes_and_gpus_are_listed_with_their_readings(client: httpx.AsyncClient, db: Database) -> None:
    await _node(db)
    nodes = (await client.get("/api/v1/nodes")).json()["items"]
    assert [(n["id"], n["state"], n["drained"], n["gpu_count"], n["lost_gpus"]) for n in nodes] == [
        ("gpu-node-1", "READY", False, 3, 1)
    ]
    assert nodes[0]["simulated"] is True
    detail = (await client.get("/api/v1/nodes/gpu-node-1")).json()
    by_index = {g["index"]: g for g in detail["gpus"]}
    assert by_index[0]["utilization_pct"] == 97.0
    assert by_index[1]["lost"] is True
    assert by_index[1]["utilization_pct"] is None
    assert by_index[2]["unsupported"] == ["power_w"]
    gpus = (await client.get("/api/v1/gpus", params={"node": "gpu-node-1"})).json()["items"]
    assert len(gpus) == 3


async def test_a_drain_is_an_admin_request_recorded_for_the_monitor(
    client: httpx.AsyncClient, db: Database
) -> None:
    await _node(db)
    response = await client.post("/api/v1/nodes/gpu-node-1/drain", json={"reason": "swap PSU"})
    assert response.status_code == 202, response.text
    assert response.json()["drain"] is True
    rows = await db.fetch(
        "SELECT subject, payload FROM corral.outbox WHERE subject LIKE 'corral.node.drain%'"
    )
    assert [r["subject"] for r in rows] == ["corral.node.drain_requested.gpu-node-1"]
    assert b'"reason":"swap PSU"' in rows[0]["payload"]
    assert (await client.post("/api/v1/nodes/gpu-node-1/undrain")).status_code == 202


async def test_drain_refuses_users_unknown_nodes_and_hostile_ids(
    client: httpx.AsyncClient, db: Database
) -> None:
    await _node(db)
    async with await _user_client(client, db) as alice:
        refused = await alice.post("/api/v1/nodes/gpu-node-1/drain", json={"reason": "mine now"})
        assert refused.status_code == 403
        assert "admin" in refused.json()["detail"]
        assert (await alice.get("/api/v1/nodes")).status_code == 200  # reading is for everyone
    unknown = await client.post("/api/v1/nodes/no-such-node/drain")
    assert unknown.status_code == 404
    assert "GET /api/v1/nodes" in unknown.json()["detail"]
    for hostile in ("..%2F..%2Fetc", "a%20b", "x" * 80):
        assert (await client.post(f"/api/v1/nodes/{hostile}/drain")).status_code in (404, 422)
    too_long = await client.post("/api/v1/nodes/gpu-node-1/drain", json={"reason": "x" * 501})
    assert too_long.status_code == 422
    assert not await db.fetch("SELECT 1 FROM corral.outbox WHERE subject LIKE 'corral.node.drain%'")


async def test_gpu_history_by_node_gpu_and_job(client: httpx.AsyncClient, db: Database) -> None:
    await _node(db)
    spec = {"name": "t", "tasks": [{"name": "main", "command": "true", "resources": {"gpus": 1}}]}
    job_id = (await client.post("/api/v1/jobs", json=spec)).json()["id"]
    now = datetime.now(UTC).replace(microsecond=0)
    rows = [
        HistoryRow(
            now - timedelta(seconds=10 * k),
            "gpu-node-1",
            0,
            job_id if k < 3 else None,
            10,
            50.0,
            60.0,
            1000,
            40.0,
            300.0,
        )
        for k in range(6)
    ]
    async with db.transaction() as conn:
        await write_history(conn, 10, rows)
        await write_history(conn, 10, rows[:1])  # a second monitor's share of the same bucket
    points = (await client.get("/api/v1/gpu-history", params={"node": "gpu-node-1", "gpu": 0})).json()[
        "points"
    ]
    assert len(points) == 6
    assert points[-1]["samples"] == 20  # merged
    by_job = (await client.get("/api/v1/gpu-history", params={"job": job_id})).json()["points"]
    assert len(by_job) == 3
    assert {p["job_id"] for p in by_job} == {job_id}
    assert (await client.get("/api/v1/gpu-history", params={"job": "job-nope"})).status_code == 404
    assert (await client.get("/api/v1/gpu-history", params={"job": "job-\x00"})).status_code == 422
    nul_reason = await client.post("/api/v1/nodes/gpu-node-1/drain", json={"reason": "a\u0000b"})
    assert nul_reason.status_code == 422
    assert (await client.get("/api/v1/gpu-history", params={"resolution_s": 7})).status_code == 422
