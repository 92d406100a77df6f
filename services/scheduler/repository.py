"""All of the scheduler's SQL, through the named queries of ``sql/``: what a cycle reads,
and the statements that write its decisions. Nothing here decides.

The big reads of a cycle (pending queue, live allocations, ready nodes: thousands of
rows at scale) return asyncpg's records as they come: ``snapshot.py`` makes each into
the model once, and a typed copy in between would cost a tuple per row per cycle. The
rest return typed values.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, cast

import asyncpg

from services.scheduler.model import PendingJob, Topology, VirtualCluster, Waiting, task_demand
from shared.db.pool import Connection
from shared.db.queries import Queries
from shared.outbox import OutboxRow

SQL = Queries(Path(__file__).parent / "sql")

# One job placed, one placement: the columns of ``commit_placements``.
PlacedJob = tuple[str, int, int]  # job, version read, new generation
Allocation = tuple[str, int, str, int, str, Sequence[int], bool, bool, int]
# (job, generation, role, index, node, GPU indices, borrowed, promoted, share in thousandths)


class Eviction(NamedTuple):
    """A job holding GPUs on a node drained with eviction."""

    job_id: str
    node_id: str
    drain_reason: str


# --- the snapshot --------------------------------------------------------------------


async def release_finished_allocations(conn: Connection) -> None:
    """Free the GPUs of jobs that ended or went back to the queue."""
    await conn.execute(SQL.release_finished_allocations)


async def live_allocations(conn: Connection) -> list[asyncpg.Record]:
    """Every placed job's allocation rows, ordered by job, with what victims are chosen by."""
    return await conn.fetch(SQL.live_allocations)


async def ready_nodes(conn: Connection) -> list[asyncpg.Record]:
    """The nodes that can take work, each with its GPUs (indices, NVLink domains, model)."""
    return await conn.fetch(SQL.ready_nodes)


async def node_models(conn: Connection, node_ids: list[str]) -> dict[str, str]:
    """The GPU model of each of these nodes (those that have GPUs)."""
    return {row["node_id"]: row["model"] for row in await conn.fetch(SQL.node_models, node_ids)}


async def pending_queue(conn: Connection, max_pending: int) -> list[asyncpg.Record]:
    """The first ``max_pending`` pending jobs, oldest first: id, version, generation,
    attained GPU-seconds and age."""
    return await conn.fetch(SQL.pending_queue, max_pending)


async def pending_demands(conn: Connection, job_ids: list[str]) -> list[PendingJob]:
    """What these jobs ask for (pre-extracted from their specs by SQL, not re-validated),
    with version and waits still to be set by a read of the queue."""
    return [_demands(row) for row in await conn.fetch(SQL.pending_demands, job_ids)]


def _demands(row: asyncpg.Record) -> PendingJob:
    return PendingJob(
        job_id=row["id"],
        version=0,  # (a read sets it, with the job's waits and attained service)
        priority=row["priority"],
        tasks=tuple(
            task_demand(name, int(instances), float(gpus), float(cpus), int(memory_mb))
            for name, instances, gpus, cpus, memory_mb in row["tasks"]
        ),
        vc=row["virtual_cluster"],
        user=row["username"],
        gpu_type=row["gpu_type"],
        topology=cast(Topology, row["topology"]),
        max_runtime_s=row["max_runtime_s"],
        traceparent=row["traceparent"],
        service=bool(row["service"]),
        needs_image_runtime=bool(row["needs_image_runtime"]),
    )


async def virtual_clusters(conn: Connection) -> dict[str, VirtualCluster]:
    """Every VC by name, its quota keyed by upper-case GPU type."""
    return {
        row["name"]: VirtualCluster(
            row["name"],
            {gpu_type.upper(): int(gpus) for gpu_type, gpus in row["quota"].items()},
            row["max_gpus_per_user"],
        )
        for row in await conn.fetch(SQL.virtual_clusters)
    }


async def largest_unready_node(conn: Connection, ready: list[str]) -> int:
    """The most GPUs on a registered node not among ``ready``."""
    return int(await conn.fetchval(SQL.largest_unready_node, ready))


async def finished_waits(conn: Connection, after_s: float) -> list[tuple[float, float]]:
    """(finished at, queueing delay) of the jobs that finished after ``after_s`` (epoch
    seconds), in the order they finished: what the starvation limit's typical wait folds
    in (starvation.py)."""
    return [(row["finished_s"], row["waited_s"]) for row in await conn.fetch(SQL.finished_waits, after_s)]


# --- the decisions -------------------------------------------------------------------


async def write_pending_status(
    conn: Connection,
    changed: list[Waiting],
    waiting_ids: list[str],
    *,
    order_changed: bool,
    gone: list[str] | None = None,
) -> None:
    """Why each job waits: the rows that changed, and none for jobs no longer waiting;
    and, when it changed, the order they wait in (``waiting_ids``: their positions).

    ``gone``: the jobs that waited after the last cycle this scheduler committed and no
    longer do, whose rows are all there is to delete (a few, where the whole queue went
    to Postgres to be anti-joined every cycle); None when that is not known (a new
    leader): every row of a job not waiting now goes."""
    if gone is None:
        await conn.execute(SQL.forget_pending_status, waiting_ids)
    elif gone:
        await conn.execute(SQL.forget_pending_status_of, gone)
    if changed:
        await conn.execute(
            SQL.write_pending_status,
            [w.job_id for w in changed],
            [w.reason for w in changed],
            [w.detail for w in changed],
            [w.estimated_start_s for w in changed],
        )
    if order_changed:
        await conn.execute(SQL.write_queue_order, waiting_ids)


async def commit_placements(
    conn: Connection,
    jobs: list[PlacedJob],
    allocations: list[Allocation],
    events: list[OutboxRow],
    notified: list[str],
    channel: str,
) -> set[str]:
    """Every placement of a cycle in one statement: each job still at the version read
    becomes SCHEDULED with its allocations and its event (an outbox row); the events of
    ``notified`` NOTIFY the relays on ``channel``. Returns the jobs placed (one that
    changed since the read is skipped, with its allocations and event)."""
    rows = [(*row[:5], json.dumps(row[5])) for row in events]
    allocation_rows = [(*a[:5], _int_array(a[5]), *a[6:8]) for a in allocations]
    scheduled = await conn.fetch(
        SQL.commit_placements,
        *_columns(jobs, 3),
        *_columns(allocation_rows, 8),
        *_columns(rows, 6),
        notified,
        channel,
        [a[8] for a in allocations],
    )
    return {row["id"] for row in scheduled}


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Rows as columns, each an array parameter of an ``unnest``."""
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


def _int_array(values: Sequence[int]) -> str:
    """An int[] literal ('{0,1}'): arrays of unequal length cannot share a 2-D parameter."""
    return "{" + ",".join(str(int(v)) for v in values) + "}"


async def insert_preemption(conn: Connection, job_id: str, reason: str) -> int | None:
    """Record the decision to preempt the job's current generation; that generation, or
    None if the job is not placed or was asked already."""
    generation: int | None = await conn.fetchval(SQL.insert_preemption, job_id, reason)
    return generation


async def jobs_on_evicting_nodes(conn: Connection) -> list[Eviction]:
    """The jobs holding GPUs on nodes drained with eviction, by job."""
    return [
        Eviction(row["job_id"], row["node_id"], row["drain_reason"])
        for row in await conn.fetch(SQL.jobs_on_evicting_nodes)
    ]
