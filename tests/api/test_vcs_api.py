"""Virtual clusters through the API: admins create, resize and delete them at runtime;
everyone reads quotas and usage; a submit to a VC that does not exist, or of a job no
registered node could ever hold, is refused with a 422 that says why and stores nothing."""

from __future__ import annotations

import httpx

from services.api.tenants.auth import hash_token, upsert_token
from services.api.tenants.repository import TenantRepository
from services.monitor.registration import register_nodes
from shared.db.pool import Database
from shared.events.nodes import GpuSample, NodeTelemetryData


async def _nodes(db: Database, *shapes: tuple[str, int, str]) -> None:
    """Registered nodes: (id, GPUs, model)."""
    telemetry = [
        NodeTelemetryData(
            node_id=node_id,
            hostname=node_id,
            simulated=True,
            interval_s=1.0,
            gpus=[
                GpuSample(index=i, uuid=f"GPU-{node_id}-{i}", model=model, memory_total_mb=81_559)
                for i in range(gpus)
            ],
        )
        for node_id, gpus, model in shapes
    ]
    async with db.transaction() as conn:
        await register_nodes(conn, telemetry)


def _spec(gpus: int, instances: int = 1, **fields: object) -> dict[str, object]:
    resources: dict[str, object] = {"gpus": gpus}
    if "gpu_type" in fields:
        resources["gpu_type"] = fields.pop("gpu_type")
    task = {"name": "main", "instances": instances, "command": "true", "resources": resources}
    return {"name": "train", "tasks": [task], **fields}


async def _jobs(db: Database) -> int:
    return int(await db.fetchval("SELECT count(*) FROM api.jobs"))


async def test_an_admin_creates_and_resizes_a_vc_and_everyone_sees_it(
    client: httpx.AsyncClient, db: Database
) -> None:
    await _nodes(db, ("n0", 8, "NVIDIA H100 80GB HBM3"))
    created = await client.put(
        "/api/v1/virtual-clusters/vision", json={"quota": {"h100": 6}, "max_gpus_per_user": 4}
    )
    assert created.status_code == 201, created.text
    assert created.json()["quota"] == {"H100": 6}
    assert created.json()["warnings"] == []
    resized = await client.put("/api/v1/virtual-clusters/vision", json={"quota": {"H100": 8}})
    assert resized.status_code == 200
    assert (resized.json()["quota"], resized.json()["max_gpus_per_user"]) == ({"H100": 8}, None)
    await upsert_token(TenantRepository(db), "tok-alice", "alice", hash_token("crl_alice"), "user", "alice")
    async with httpx.AsyncClient(
        transport=client._transport, base_url=client.base_url, headers={"Authorization": "Bearer crl_alice"}
    ) as alice:
        listed = (await alice.get("/api/v1/virtual-clusters")).json()["items"]
        assert [(v["name"], v["quota"]) for v in listed] == [("default", {}), ("vision", {"H100": 8})]
        refused = await alice.put("/api/v1/virtual-clusters/mine", json={"quota": {"H100": 8}})
        assert refused.status_code == 403
        assert refused.json()["detail"] == "only an admin may create or resize virtual clusters"
    submitted = await client.post("/api/v1/jobs", json=_spec(2, virtual_cluster="vision"))
    assert submitted.status_code == 201, submitted.text
    vision = (await client.get("/api/v1/virtual-clusters/vision")).json()
    assert (vision["pending_jobs"], vision["running_jobs"], vision["usage"]) == (1, 0, {})


async def test_promising_more_than_the_cluster_has_is_allowed_with_a_warning(
    client: httpx.AsyncClient, db: Database
) -> None:
    await _nodes(db, ("n0", 8, "NVIDIA H100 80GB HBM3"))
    await client.put("/api/v1/virtual-clusters/a", json={"quota": {"H100": 6}})
    over = (await client.put("/api/v1/virtual-clusters/b", json={"quota": {"H100": 4, "A100": 2}})).json()
    assert over["warnings"] == [
        "no registered node has A100 GPUs yet; the quota holds once some do",
        "VCs are promised 10 H100 GPUs in all and the cluster has 8: not every VC can get its quota at once",
    ]


async def test_a_vc_is_deleted_only_when_empty(client: httpx.AsyncClient, db: Database) -> None:
    await client.put("/api/v1/virtual-clusters/tmp", json={})
    job = (await client.post("/api/v1/jobs", json=_spec(0, virtual_cluster="tmp"))).json()
    busy = await client.delete("/api/v1/virtual-clusters/tmp")
    assert busy.status_code == 409
    assert busy.json()["detail"] == (
        "virtual cluster tmp still has 1 job(s) waiting or running; cancel them or let them end,"
        " then delete it"
    )
    await client.post(f"/api/v1/jobs/{job['id']}/cancel")
    assert (await client.delete("/api/v1/virtual-clusters/tmp")).status_code == 204
    assert (await client.get("/api/v1/virtual-clusters/tmp")).status_code == 404
    assert (await client.delete("/api/v1/virtual-clusters/default")).status_code == 409


async def test_bad_vc_definitions_are_refused_and_change_nothing(
    client: httpx.AsyncClient, db: Database
) -> None:
    for name, body in [
        ("ok", {"quota": {"H100": -1}}),
        ("ok", {"quota": {"../etc": 1}}),
        ("ok", {"quota": {"H100": 1, "h100": 2}}),
        ("ok", {"quota": [1]}),
        ("ok", {"surprise": 1}),
        ("Bad Name", {}),
    ]:
        response = await client.put(f"/api/v1/virtual-clusters/{name}", json=body)
        assert response.status_code == 422, (name, body, response.text)
        assert response.headers["content-type"] == "application/problem+json"
    assert [v["name"] for v in (await client.get("/api/v1/virtual-clusters")).json()["items"]] == ["default"]


async def test_jobs_that_can_never_run_are_refused_at_submit(client: httpx.AsyncClient, db: Database) -> None:
    # A fresh cluster (no node yet) cannot tell: it accepts.
    assert (await client.post("/api/v1/jobs", json=_spec(16))).status_code == 201
    await _nodes(
        db,
        ("n0", 8, "NVIDIA H100 80GB HBM3"),
        ("n1", 8, "NVIDIA H100 80GB HBM3"),
        ("a0", 4, "NVIDIA A100-SXM4-80GB"),
    )
    # A drained node still counts: a job only it could hold is accepted, and waits for it.
    await db.execute("UPDATE monitor.nodes SET drained_at = now(), drain_reason = 'repair' WHERE id = 'a0'")
    before = await _jobs(db)
    cases = [
        (_spec(1, virtual_cluster="nope"), "virtual cluster 'nope' does not exist; `corral vcs` (GET"
         " /api/v1/virtual-clusters) lists those you can submit to"),
        (_spec(1, gpu_type="B200"), "no node has GPUs of type B200; this cluster has A100, H100"
         " (`corral gpus` lists them). Ask for one of those, or leave resources.gpu_type out"),
        (_spec(16), "a task asks for 16 GPUs on one node, but the largest node has 8; split the work over"
         " more task instances with fewer GPUs each"),
        (_spec(8, gpu_type="a100"), "a task asks for 8 GPUs on one node, but the largest A100 node has 4;"
         " split the work over more task instances with fewer GPUs each"),
        (_spec(4, instances=3, topology="single_node"), "topology single_node needs all 12 GPUs on one node,"
         " but the largest node has 8; use topology pack, or fewer GPUs"),
        (_spec(1, instances=3, topology="one_per_node", gpu_type="H100"), "topology one_per_node needs 3"
         " nodes, but the cluster has 2 H100 nodes; use topology pack, or fewer instances"),
        (_spec(8, instances=3), "the job needs 24 GPUs, but the cluster has 16 in all"),
    ]  # fmt: skip
    for spec, detail in cases:
        response = await client.post("/api/v1/jobs", json=spec)
        assert response.status_code == 422, response.text
        assert response.json()["detail"] == detail
    assert await _jobs(db) == before, "a refused job is not stored"
    mixed = _spec(1, gpu_type="H100")
    mixed["tasks"].append({"name": "other", "command": "true", "resources": {"gpus": 1, "gpu_type": "A100"}})  # type: ignore[attr-defined]
    response = await client.post("/api/v1/jobs", json=mixed)
    assert response.status_code == 422
    assert "a job runs on one GPU type, but its tasks ask for A100, H100" in response.text
    assert (await client.post("/api/v1/jobs", json=_spec(4, gpu_type="A100"))).status_code == 201


async def test_a_task_asking_more_cpus_or_memory_than_any_node_offers_is_refused(
    client: httpx.AsyncClient, db: Database
) -> None:
    sizes = {"n0": (16.0, 65_536), "n1": (64.0, 262_144)}
    async with db.transaction() as conn:
        await register_nodes(
            conn,
            [
                NodeTelemetryData(
                    node_id=node_id,
                    hostname=node_id,
                    simulated=True,
                    interval_s=1.0,
                    cpus=cpus,
                    memory_mb=memory_mb,
                    gpus=[GpuSample(index=0, uuid=f"GPU-{node_id}", model="NVIDIA H100", memory_total_mb=1)],
                )
                for node_id, (cpus, memory_mb) in sizes.items()
            ],
        )

    def spec(cpus: float, memory_mb: int) -> dict[str, object]:
        task = {
            "name": "prep",
            "command": "true",
            "resources": {"gpus": 1, "cpus": cpus, "memory_mb": memory_mb},
        }
        return {"name": "train", "tasks": [task]}

    before = await _jobs(db)
    too_many = await client.post("/api/v1/jobs", json=spec(96, 1024))
    assert too_many.status_code == 422
    assert too_many.json()["detail"] == (
        "task prep asks for 96 CPUs per instance, but the largest node offers 64;"
        " ask for fewer (resources.cpus), or split the work"
    )
    too_much = await client.post("/api/v1/jobs", json=spec(8, 300_000))
    assert too_much.status_code == 422
    assert "300000 MiB of memory per instance, but the largest node offers 262144 MiB" in too_much.text
    assert await _jobs(db) == before
    assert (await client.post("/api/v1/jobs", json=spec(64, 262_144))).status_code == 201
