"""The node model from the exporters to the placement, on real Postgres: a node's rack,
its GPUs' NVLink domains, its CPUs and memory, as the simulated exporter reports them,
reach the monitor's tables and the scheduler's snapshot, and decide where a job goes."""

from __future__ import annotations

import json

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.launcher.repository import SQL as LAUNCHER_SQL
from services.monitor.exporter.simulated import SimulatedGpus
from services.monitor.health import default_rules
from services.monitor.ingest import HeartbeatIngest
from services.monitor.settings import MonitorSettings
from services.scheduler.model import PendingJob, TaskDemand
from services.scheduler.planner import plan
from services.scheduler.snapshot import load_snapshot
from shared.db.pool import Database
from shared.events import NodeTelemetry
from shared.events.nodes import NodeTelemetryData
from shared.jobs import JobSpec


def heartbeat(node: str, rack: str, domain_size: int = 4, cpus: float = 0, memory_mb: int = 0) -> bytes:
    gpus = SimulatedGpus(8, "NVIDIA H100 80GB HBM3", node, nvlink_domain_size=domain_size)
    data = NodeTelemetryData(
        node_id=node,
        hostname=node,
        simulated=True,
        interval_s=1.0,
        gpus=gpus.sample(),
        rack=rack,
        cpus=cpus,
        memory_mb=memory_mb,
    )
    return NodeTelemetry(source="corral/exporter", subject=node, data=data).model_dump_json().encode()


async def test_racks_and_nvlink_domains_reach_the_scheduler_and_place_the_gang(db: Database) -> None:
    monitor = HeartbeatIngest(db, default_rules(), MonitorSettings(touch_interval_s=0.001))
    racks = {"a1": "ra", "b1": "rb", "b2": "rb"}
    for node, rack in racks.items():
        monitor.receive(heartbeat(node, rack))
        await db.fetchval(LAUNCHER_SQL.register_agent, node, 60.0, "sandbox", "", 2)  # a node agent holds it
    await monitor.flush()
    assert dict(await db.fetch("SELECT id, rack FROM monitor.nodes")) == racks  # type: ignore[arg-type]
    domains = await db.fetch(
        "SELECT index, nvlink_domain FROM monitor.gpus WHERE node_id = 'b1' ORDER BY index"
    )
    assert [r["nvlink_domain"] for r in domains] == [0, 0, 0, 0, 1, 1, 1, 1]

    async with db.transaction() as conn:
        snapshot = await load_snapshot(conn, 10)
    assert {n.node_id: n.rack for n in snapshot.nodes.values()} == racks
    assert snapshot.nodes["b1"].domains == {g: g // 4 for g in range(8)}
    gang = PendingJob("job-1", 1, 0, (TaskDemand("worker", 2, 8),))
    [decision] = plan([gang], snapshot.nodes).decisions
    assert {p.node_id for p in decision.placements} == {"b1", "b2"}  # one rack, not a1 + b1
    pair = PendingJob("job-2", 1, 0, (TaskDemand("worker", 1, 2),))
    [decision] = plan([pair], snapshot.nodes).decisions
    assert decision.placements[0].gpu_indices == (0, 1)  # one NVLink domain

    # Relabelling a node (moved to another rack) registers it again, with its new rack.
    monitor.receive(heartbeat("a1", "rb"))
    await monitor.flush()
    assert await db.fetchval("SELECT rack FROM monitor.nodes WHERE id = 'a1'") == "rb"
    announced = [
        json.loads(r["payload"])["data"]
        for r in await db.fetch(
            "SELECT payload FROM corral.outbox WHERE subject = 'corral.node.registered.a1' ORDER BY id"
        )
    ]
    assert [a["rack"] for a in announced] == ["ra", "rb"]
    assert [g["nvlink_domain"] for g in announced[-1]["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]


async def test_cpus_and_memory_in_use_are_counted_from_the_placed_jobs_specs(db: Database) -> None:
    monitor = HeartbeatIngest(db, default_rules(), MonitorSettings(touch_interval_s=0.001))
    for node in ("n1", "n2"):
        monitor.receive(heartbeat(node, "", cpus=16, memory_mb=65536))
        await db.fetchval(LAUNCHER_SQL.register_agent, node, 60.0, "sandbox", "", 2)
    await monitor.flush()
    spec = JobSpec.model_validate(
        {
            "name": "cpu-heavy",
            "tasks": [
                {
                    "name": "w",
                    "instances": 1,
                    "command": "true",
                    "resources": {"gpus": 1, "cpus": 12, "memory_mb": 4096},
                }
            ],
        }
    )
    job_id = (await Submitter(JobRepository(db)).submit(spec, "alice", None)).job.id
    await db.execute("UPDATE api.jobs SET state = 'SCHEDULED', generation = 1 WHERE id = $1", job_id)
    await db.execute(
        "INSERT INTO scheduler.allocations (job_id, generation, task_role, task_index, node_id, gpu_indices)"
        " VALUES ($1, 1, 'w', 0, 'n1', '{0}')",
        job_id,
    )
    await Submitter(JobRepository(db)).submit(spec, "bob", None)  # the same demands, still pending

    async with db.transaction() as conn:
        snapshot = await load_snapshot(conn, 10, release=False)
    assert (snapshot.nodes["n1"].free_cpus, snapshot.nodes["n1"].free_memory_mb) == (4.0, 61440)
    assert (snapshot.nodes["n2"].free_cpus, snapshot.nodes["n2"].free_memory_mb) == (16.0, 65536)
    [pending] = snapshot.pending  # its demands come from the spec, defaults included
    assert pending.tasks[0].cpus == 12.0
    assert pending.tasks[0].memory_mb == 4096
    wants_8 = PendingJob("job-x", 1, 0, (TaskDemand("w", 1, 1, cpus=8),))
    [decision] = plan([wants_8], snapshot.nodes).decisions
    assert decision.placements[0].node_id == "n2"  # n1 has GPUs free but only 4 CPUs
