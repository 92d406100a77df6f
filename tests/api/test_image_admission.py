"""A job whose tasks name an image, where no registered node runs images, is refused at submit
with a 422 that names the opt-in (``allow_host_execution``); with the opt-in, or once a node
runs images (a container runtime, or a node run by Kubernetes), it is accepted."""

from __future__ import annotations

import httpx

from services.monitor.registration import register_nodes
from shared.container_runtime import RuntimeName
from shared.db.pool import Database
from shared.events.nodes import GpuSample, NodeTelemetryData


async def _node(db: Database, node_id: str, runtime: RuntimeName = "") -> None:
    gpu = GpuSample(index=0, uuid=f"GPU-{node_id}", model="NVIDIA H100 80GB HBM3", memory_total_mb=81_559)
    data = NodeTelemetryData(
        node_id=node_id,
        hostname=node_id,
        simulated=True,
        interval_s=1.0,
        gpus=[gpu],
        container_runtime=runtime,
    )
    async with db.transaction() as conn:
        await register_nodes(conn, [data])


def _spec(image: str | None, **fields: object) -> dict[str, object]:
    task: dict[str, object] = {"name": "main", "command": "python train.py", "resources": {"gpus": 1}}
    if image is not None:
        task["image"] = image
    return {"name": "train", "tasks": [task], **fields}


async def test_an_image_job_is_refused_where_no_node_runs_images_unless_it_opts_in(
    client: httpx.AsyncClient, db: Database
) -> None:
    await _node(db, "n1")
    response = await client.post("/api/v1/jobs", json=_spec("pytorch/pytorch:2.4.0"))
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == (
        "the job's tasks run in image pytorch/pytorch:2.4.0, but no node of this cluster runs container"
        " images (none sets CORRAL_CONTAINER_RUNTIME, none is run by Kubernetes). Set"
        " allow_host_execution: true to run the command on a node's host, outside the image, or ask an"
        " operator for a node with a container runtime"
    )
    assert await db.fetchval("SELECT count(*) FROM api.jobs") == 0
    opted = await client.post("/api/v1/jobs", json=_spec("pytorch/pytorch:2.4.0", allow_host_execution=True))
    assert opted.status_code == 201, opted.text
    assert (await client.post("/api/v1/jobs", json=_spec(None))).status_code == 201


async def test_an_image_job_is_accepted_once_a_node_runs_images(
    client: httpx.AsyncClient, db: Database
) -> None:
    await _node(db, "n1")
    await _node(db, "n2", "podman")
    # A drained node still counts, as for GPUs: it comes back.
    await db.execute("UPDATE monitor.nodes SET drained_at = now(), drain_reason = 'repair' WHERE id = 'n2'")
    response = await client.post("/api/v1/jobs", json=_spec("pytorch/pytorch:2.4.0"))
    assert response.status_code == 201, response.text


async def test_a_node_run_by_kubernetes_runs_images(client: httpx.AsyncClient, db: Database) -> None:
    await _node(db, "k1")
    await db.execute(
        "INSERT INTO launcher.agents (node_id, epoch, lease_expires_at, isolation)"
        " VALUES ('k1', 1, now() + interval '1 hour', 'pod')"
    )
    assert (await client.post("/api/v1/jobs", json=_spec("pytorch/pytorch:2.4.0"))).status_code == 201


async def test_a_fresh_cluster_cannot_tell_and_accepts(client: httpx.AsyncClient) -> None:
    assert (await client.post("/api/v1/jobs", json=_spec("pytorch/pytorch:2.4.0"))).status_code == 201
