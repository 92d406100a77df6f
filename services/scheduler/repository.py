"""All of the scheduler's SQL: the snapshot it decides on and the decisions it commits."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

import asyncpg

from services.scheduler.model import (
    Decision,
    NodeCapacity,
    PendingJob,
    RunningJob,
    TaskDemand,
    Topology,
    VirtualCluster,
    Waiting,
)
from shared.db.pool import Connection, after_commit
from shared.db.queries import Queries
from shared.events import JobScheduled
from shared.events.jobs import JobScheduledData, TaskPlacement
from shared.gpu_types import gpu_type_of
from shared.outbox import PUBLISHED_WITHIN_S, OutboxRow, notify_channel, outbox_row, relay_on_commit
from shared.telemetry import continue_trace

SQL = Queries(Path(__file__).parent / "sql")
SOURCE = "corral/scheduler"


@dataclass
class Snapshot:
    pending: list[PendingJob]
    nodes: dict[str, NodeCapacity]
    running: list[RunningJob]
    vcs: dict[str, VirtualCluster]
    largest_unready_node: int  # GPUs on the biggest registered node that is not ready


class PendingJobs:
    """The pending jobs as the last read left them, kept from one cycle to the next.

    What a job asks for (its spec: roles, GPUs, type, topology, limit; its priority, VC
    and owner) never changes after submit, and was validated then. So a cycle reads
    four columns per pending job, and the demands — pre-extracted from the spec by SQL,
    not re-validated — only of the jobs it has not seen yet: with thousands queued, the
    cycle had spent more on re-reading and re-building the same jobs than on deciding.
    """

    def __init__(self) -> None:
        self._jobs: dict[str, PendingJob] = {}

    async def read(self, conn: Connection, max_pending: int) -> list[PendingJob]:
        """The first ``max_pending`` pending jobs, oldest first, as they are now."""
        rows = await conn.fetch(SQL.pending_queue, max_pending)
        unseen = [row["id"] for row in rows if row["id"] not in self._jobs]
        if unseen:
            for row in await conn.fetch(SQL.pending_demands, unseen):
                self._jobs[row["id"]] = _demands(row)
        pending = []
        for row in rows:
            job = self._jobs.get(row["id"])
            if job is not None:
                # Its waits: its age less the time its runs took (attained GPU-seconds
                # over its GPUs: exact for gangs whose instances run alike).
                attained = row["attained_gpu_s"]
                waited = max(0.0, row["age_s"] - (attained / job.gpus if job.gpus else 0.0))
                pending.append(job.progressed(row["version"], row["generation"], attained, waited))
        self._jobs = {job.job_id: job for job in pending}  # forget the ones that left
        return pending


def _demands(row: asyncpg.Record) -> PendingJob:
    return PendingJob(
        job_id=row["id"],
        version=0,  # (a read sets it, with the job's waits and attained service)
        priority=row["priority"],
        tasks=tuple(
            TaskDemand(name, int(instances), int(gpus), float(cpus), int(memory_mb))
            for name, instances, gpus, cpus, memory_mb in row["tasks"]
        ),
        vc=row["virtual_cluster"],
        user=row["username"],
        gpu_type=row["gpu_type"],
        topology=cast(Topology, row["topology"]),
        max_runtime_s=row["max_runtime_s"],
        traceparent=row["traceparent"],
    )


async def load_snapshot(
    conn: Connection, max_pending: int, *, release: bool = True, known: PendingJobs | None = None
) -> Snapshot:
    """Everything a cycle decides on. ``release`` first frees the GPUs of jobs that ended
    (the cycle does; a dry run, which writes nothing, does not — so it reads such GPUs as
    still held: one cycle's lag at most). ``known``: the pending jobs the last cycle read
    (the live cycle keeps them; without, every pending job is read whole)."""
    if release:
        await conn.execute(SQL.release_finished_allocations)
    allocations = await conn.fetch(SQL.live_allocations)
    used: dict[str, set[int]] = {}
    cpus_used: dict[str, float] = {}
    memory_used: dict[str, int] = {}
    for row in allocations:
        node_id = row["node_id"]
        used.setdefault(node_id, set()).update(row["gpu_indices"])
        cpus_used[node_id] = cpus_used.get(node_id, 0.0) + (row["cpus"] or 0.0)
        memory_used[node_id] = memory_used.get(node_id, 0) + (row["memory_mb"] or 0)
    nodes = {}
    for row in await conn.fetch(SQL.ready_nodes):
        indices = [i for i in row["gpu_indices"] if i is not None]
        domains = dict(zip(indices, (d for d in row["gpu_domains"] if d is not None), strict=True))
        busy = used.get(row["id"], set())
        nodes[row["id"]] = NodeCapacity(
            row["id"],
            [i for i in indices if i not in busy],
            total_gpus=len(indices),
            gpu_type=gpu_type_of(row["model"]) if row["model"] else "",
            rack=row["rack"],
            domains=domains if len(set(domains.values())) > 1 else {},  # one domain: none to keep
            # A node that reports no CPUs or memory (0) puts no limit on them.
            free_cpus=row["cpus"] - cpus_used.get(row["id"], 0.0) if row["cpus"] else None,
            free_memory_mb=row["memory_mb"] - memory_used.get(row["id"], 0) if row["memory_mb"] else None,
        )
    running = await _running_jobs(conn, allocations, nodes)
    pending = await (known or PendingJobs()).read(conn, max_pending)
    vcs = {
        row["name"]: VirtualCluster(
            row["name"],
            {gpu_type.upper(): int(gpus) for gpu_type, gpus in row["quota"].items()},
            row["max_gpus_per_user"],
        )
        for row in await conn.fetch(SQL.virtual_clusters)
    }
    largest_unready = await conn.fetchval(SQL.largest_unready_node, list(nodes))
    return Snapshot(pending, nodes, running, vcs, int(largest_unready))


async def _running_jobs(
    conn: Connection, rows: Sequence[asyncpg.Record], nodes: dict[str, NodeCapacity]
) -> list[RunningJob]:
    """Placed jobs from their allocation rows (ordered by job), typed by their nodes' GPUs."""
    elsewhere = sorted({r["node_id"] for r in rows} - set(nodes))
    types = {node_id: node.gpu_type for node_id, node in nodes.items()}
    if elsewhere:
        for row in await conn.fetch(SQL.node_models, elsewhere):
            types[row["node_id"]] = gpu_type_of(row["model"])
    jobs: list[RunningJob] = []
    slices: list[tuple[str, tuple[int, ...]]] = []
    for n, row in enumerate(rows):
        slices.append((row["node_id"], tuple(row["gpu_indices"])))
        if n + 1 < len(rows) and rows[n + 1]["job_id"] == row["job_id"]:
            continue
        gpu_nodes = [node for node, gpus in slices if gpus]
        jobs.append(
            RunningJob(
                job_id=row["job_id"],
                vc=row["virtual_cluster"],
                user=row["username"],
                priority=row["priority"],
                gpu_type=types.get(gpu_nodes[0], "") if gpu_nodes else "",
                slices=tuple(slices),
                borrowed=row["borrowed"],
                promoted=row["promoted"],
                runtime_s=row["runtime_s"],
                max_runtime_s=row["max_runtime_s"],
                preempting=row["preempting"],
                attained_gpu_s=row["attained_gpu_s"],
                waited_s=_waited_before(row, sum(len(gpus) for _, gpus in slices)),
            )
        )
        slices = []
    return jobs


async def finished_waits(conn: Connection, after_s: float) -> list[tuple[float, float]]:
    """(finished at, queueing delay) of the jobs that finished after ``after_s`` (epoch
    seconds), in the order they finished: what the starvation limit's typical wait folds
    in (starvation.py)."""
    return [(row["finished_s"], row["waited_s"]) for row in await conn.fetch(SQL.finished_waits, after_s)]


def _waited_before(row: asyncpg.Record, gpus: int) -> float:
    """A placed job's waits before this run: from submit to placement, less earlier runs."""
    attained: float = row["attained_gpu_s"]
    placed_after: float = row["placed_after_s"]
    earlier_gpu_s = max(0.0, attained - gpus * row["runtime_s"])
    return max(0.0, placed_after - (earlier_gpu_s / gpus if gpus else 0.0))


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


async def commit_decisions(conn: Connection, decisions: list[Decision]) -> int:
    """Write every placement of the cycle in one statement (``commit_placements``); the
    caller holds one transaction. How many jobs it placed: a job that changed since the
    snapshot (e.g. cancelled) is skipped."""
    if not decisions:
        return 0
    jobs: list[tuple[str, int, int]] = []
    allocations: list[tuple[str, int, str, int, str, str, bool, bool]] = []
    events: list[OutboxRow] = []
    notified: list[str] = []  # the events the relays publish, after a NOTIFY
    relay = relay_on_commit(conn)
    for decision in decisions:
        job, generation = decision.job, decision.job.generation + 1
        jobs.append((job.job_id, job.version, generation))
        allocations.extend(
            (
                job.job_id,
                generation,
                p.role,
                p.index,
                p.node_id,
                _int_array(p.gpu_indices),
                decision.borrowed,
                decision.promoted,
            )
            for p in decision.placements
        )
        # The decision joins the job's own trace (from its submit), not the cycle's: its
        # event carries that span's context.
        with continue_trace(job.traceparent, "schedule", _span_attributes(decision, generation)):
            events.append(outbox_row(_scheduled_event(decision, generation), job.job_id))
        if relay is None or _may_overtake(job):
            notified.append(events[-1][0])
    rows = [(*row[:5], json.dumps(row[5])) for row in events]
    scheduled = await conn.fetch(
        SQL.commit_placements,
        *_columns(jobs, 3),
        *_columns(allocations, 8),
        *_columns(rows, 6),
        notified,
        notify_channel(SOURCE),
    )
    placed = {row["id"] for row in scheduled}
    if relay is not None:
        through_relays = set(notified)
        on_commit = [row for row in events if row[2] in placed and row[0] not in through_relays]
        if on_commit:
            after_commit(conn, partial(relay.publish_committed, on_commit))
    return len(placed)


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Rows as columns, each an array parameter of an ``unnest``."""
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


def _int_array(values: Sequence[int]) -> str:
    """An int[] literal ('{0,1}'): arrays of unequal length cannot share a 2-D parameter."""
    return "{" + ",".join(str(int(v)) for v in values) + "}"


def _scheduled_event(decision: Decision, generation: int) -> JobScheduled:
    return JobScheduled(
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


def _span_attributes(decision: Decision, generation: int) -> dict[str, str | int]:
    return {
        "corral.job.id": decision.job.job_id,
        "corral.job.generation": generation,
        "corral.job.gpus": decision.job.gpus,
        "corral.job.nodes": len({p.node_id for p in decision.placements}),
        "corral.job.borrowed": int(decision.borrowed),
    }


def _may_overtake(job: PendingJob) -> bool:
    """Whether the job's ``job.scheduled``, published on commit, could reach the stream
    before the event that made it pending: its ``job.submitted`` (the API's) if it was
    submitted moments ago, or a requeue's ``job.retrying`` or ``job.preempted`` (the
    launcher's; a job requeued has a version past the submit's 1). The cycle reads the
    job from Postgres, not from the stream, so nothing else orders the two."""
    return job.version > 1 or job.waited_s < PUBLISHED_WITHIN_S
