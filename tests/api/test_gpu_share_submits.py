"""Submitting fractions of a GPU and MIG types: what is accepted, and what is refused with
a 422 that says why and stores nothing."""

from __future__ import annotations

import httpx

from shared.db.pool import Database
from shared.jobs import JobSpec
from tests.api.test_vcs_api import _nodes


def _spec(resources: dict[str, object], instances: int = 1, **fields: object) -> dict[str, object]:
    task = {"name": "main", "instances": instances, "command": "true", "resources": resources}
    return {"name": "share", "tasks": [task], **fields}


async def _jobs(db: Database) -> int:
    return int(await db.fetchval("SELECT count(*) FROM api.jobs"))


async def test_fractions_are_accepted_and_stored_as_asked(client: httpx.AsyncClient, db: Database) -> None:
    await _nodes(db, ("n0", 2, "NVIDIA H100 80GB HBM3"), ("n1", 2, "NVIDIA H100 80GB HBM3"))
    for spec in (
        _spec({"gpus": 0.5}),
        _spec({"gpus": 0.25, "gpu_memory_mb": 20000}),
        _spec({"gpus": 1.0}),  # a whole GPU, written as a number with a point
    ):
        response = await client.post("/api/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
    stored = [
        JobSpec.model_validate(r["spec"])
        for r in await db.fetch("SELECT spec FROM api.jobs ORDER BY created_at")
    ]
    assert [s.tasks[0].resources.gpus for s in stored] == [0.5, 0.25, 1]
    assert isinstance(stored[2].tasks[0].resources.gpus, int)
    assert [
        r["total_gpus"] for r in await db.fetch("SELECT total_gpus FROM api.jobs ORDER BY created_at")
    ] == [
        1,
        1,
        1,
    ]


async def test_a_fraction_over_one_node_each_is_fine_where_there_are_nodes(
    client: httpx.AsyncClient, db: Database
) -> None:
    await _nodes(db, *((f"n{i}", 1, "NVIDIA H100 80GB HBM3") for i in range(4)))
    response = await client.post(
        "/api/v1/jobs", json=_spec({"gpus": 0.3}, instances=4, topology="one_per_node")
    )
    assert response.status_code == 201, response.text
    assert await db.fetchval("SELECT total_gpus FROM api.jobs") == 2  # 1.2 GPUs, counted up in tables


async def test_bad_fractions_are_refused_saying_what_to_ask(client: httpx.AsyncClient, db: Database) -> None:
    await _nodes(db, ("n0", 8, "NVIDIA H100 80GB HBM3"))
    cases: list[tuple[dict[str, object], str]] = [
        ({"gpus": 1.5}, "a task asks for whole GPUs or a fraction of one (0.001 to 0.999), not 1.5"),
        ({"gpus": 0.0004}, "a task asks for whole GPUs or a fraction of one (0.001 to 0.999), not 0.0004"),
        ({"gpus": 0.9999999999}, "a task asks for whole GPUs or a fraction of one (0.001 to 0.999)"),
        ({"gpus": 2, "gpu_memory_mb": 1000}, "gpu_memory_mb is for a fraction of a GPU (gpus below 1)"),
        ({"gpus": "0.5"}, "gpus"),
        ({"gpus": True}, "gpus"),
    ]
    for resources, words in cases:
        response = await client.post("/api/v1/jobs", json=_spec(resources))
        assert response.status_code == 422, (resources, response.text)
        assert words in response.text, (resources, response.text)
    assert await _jobs(db) == 0


async def test_mig_devices_are_gpu_types_of_their_own(client: httpx.AsyncClient, db: Database) -> None:
    await _nodes(db, ("mig0", 7, "NVIDIA H100 80GB HBM3 MIG 1g.10gb"), ("n0", 8, "NVIDIA H100 80GB HBM3"))
    accepted = await client.post(
        "/api/v1/jobs", json=_spec({"gpus": 1, "gpu_type": "H100-1g.10gb"}, instances=7)
    )
    assert accepted.status_code == 201, accepted.text
    refused = await client.post("/api/v1/jobs", json=_spec({"gpus": 1, "gpu_type": "H100-3g.40gb"}))
    assert refused.status_code == 422
    assert refused.json()["detail"].startswith(
        "no node has GPUs of type H100-3G.40GB; this cluster has H100, H100-1G.10GB"
    )
    assert await _jobs(db) == 1
