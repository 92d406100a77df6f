"""All of the scheduler's SQL: the snapshot it decides on and the decisions it commits."""

from __future__ import annotations

from pathlib import Path

from services.scheduler.placement import Decision, NodeCapacity, PendingJob, TaskDemand
from shared.db.pool import Connection
from shared.db.queries import Queries
from shared.events import JobScheduled
from shared.events.jobs import JobScheduledData, TaskPlacement
from shared.outbox import append

SQL = Queries(Path(__file__).parent / "sql")
SOURCE = "corral/scheduler"


async def load_snapshot(
    conn: Connection, max_pending: int
) -> tuple[list[PendingJob], dict[str, NodeCapacity]]:
    await conn.execute(SQL.release_finished_allocations)
    used: dict[str, set[int]] = {}
    for row in await conn.fetch(SQL.live_allocations):
        used.setdefault(row["node_id"], set()).update(row["gpu_indices"])
    nodes = {}
    for row in await conn.fetch(SQL.ready_nodes):
        indices = [i for i in row["gpu_indices"] if i is not None]
        busy = used.get(row["id"], set())
        nodes[row["id"]] = NodeCapacity(row["id"], [i for i in indices if i not in busy])
    # The spec was validated at submit; the cycle reads just the demands, pre-extracted by
    # SQL, instead of re-validating every pending spec on every cycle.
    pending = [
        PendingJob(
            job_id=row["id"],
            version=row["version"],
            priority=row["priority"],
            tasks=tuple(
                TaskDemand(name, int(instances), int(gpus)) for name, instances, gpus in row["tasks"]
            ),
        )
        for row in await conn.fetch(SQL.pending_jobs, max_pending)
    ]
    return pending, nodes


async def commit_decisions(conn: Connection, decisions: list[Decision]) -> int:
    """Write every placement of the cycle; the caller holds one transaction."""
    committed = 0
    for decision in decisions:
        generation = await conn.fetchval(SQL.mark_scheduled, decision.job.job_id, decision.job.version)
        if generation is None:
            continue  # the job changed since the snapshot (e.g. cancelled): skip it
        await conn.executemany(
            SQL.insert_allocation,
            [
                (decision.job.job_id, generation, p.role, p.index, p.node_id, list(p.gpu_indices))
                for p in decision.placements
            ],
        )
        event = JobScheduled(
            source=SOURCE,
            subject=decision.job.job_id,
            data=JobScheduledData(
                job_id=decision.job.job_id,
                generation=generation,
                placements=[
                    TaskPlacement(
                        task_role=p.role,
                        task_index=p.index,
                        node_id=p.node_id,
                        gpu_indices=list(p.gpu_indices),
                    )
                    for p in decision.placements
                ],
            ),
        )
        await append(conn, event, aggregate=decision.job.job_id)
        committed += 1
    return committed
