"""All of the launcher's SQL, through the named queries of ``sql/``: the jobs it
decides and their attempts, the agents' leases, the Kubernetes runner's part of a node.

Nothing here decides, and no event is built here: a change that goes with an event (an
attempt created, a job's new state, a task's start or end) takes the event from its
caller and writes both in one statement (``shared.outbox.append_with_change`` in the
caller's transaction, ``change_with_event`` on its own). The decisions live in
``attempts.py``, ``outcomes.py``, ``lost_nodes.py``, ``reconcile.py`` and
``reporting.py``; a node agent's own statements are ``agent/repository.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import asyncpg

from services.launcher.completion import AttemptOutcome
from shared.db.pool import Connection, Database
from shared.db.queries import Queries
from shared.events import JobRunning, TaskAssigned, TaskExited, TaskStarted
from shared.events.envelope import Envelope
from shared.outbox import Consequence, append_with_change, change_with_event

SQL = Queries(Path(__file__).parent / "sql")


@dataclass
class LockedJob:
    """A job row locked ``FOR UPDATE`` for a decision; ``state`` follows the decision's
    transitions within the transaction."""

    id: str
    state: str
    generation: int
    spec: dict[str, Any]
    retries: int
    cancel_requested_at: datetime | None
    preempt_reason: str | None


@dataclass(frozen=True)
class JobPlacement:
    """A locked job with the task instances of one generation that have no attempt yet
    (``allocations``: role, index, node, GPUs, host) and the ports live attempts hold on
    their nodes."""

    state: str
    generation: int
    spec: dict[str, Any]
    cancel_requested_at: datetime | None
    allocations: list[dict[str, Any]]
    ports_in_use: dict[str, list[int]]


class NewAttempt(NamedTuple):
    id: str
    job_id: str
    generation: int
    task_role: str
    task_index: int
    node_id: str
    gpu_indices: list[int]
    host: str
    ports: dict[str, list[int]]


class LostAgent(NamedTuple):
    node_id: str
    lease_expires_at: datetime


class LiveAttempt(NamedTuple):
    """An attempt still live on a node whose agent was declared lost."""

    id: str
    job_id: str
    node_id: str
    lease_expires_at: datetime


class EndedAttempt(NamedTuple):
    job_id: str
    node_id: str


# --- jobs and their attempts (the caller's transaction) --------------------------------


async def lock_job(conn: Connection, job_id: str) -> LockedJob | None:
    """The job's row, locked; None if there is no such job."""
    row = await conn.fetchrow(SQL.lock_job, job_id)
    if row is None:
        return None
    return LockedJob(
        id=row["id"],
        state=row["state"],
        generation=row["generation"],
        spec=row["spec"],
        retries=row["retries"],
        cancel_requested_at=row["cancel_requested_at"],
        preempt_reason=row["preempt_reason"],
    )


async def lock_job_placement(conn: Connection, job_id: str, generation: int) -> JobPlacement | None:
    """The job's row, locked, with the placement of ``generation``; first the nodes it is
    placed on, whose ports it hands out (two round trips: the ports must be read after
    the nodes' locks are held, in a statement of their own)."""
    await conn.execute(SQL.lock_placement_nodes, job_id, generation)
    row = await conn.fetchrow(SQL.lock_job_with_allocations, job_id, generation)
    if row is None:
        return None
    return JobPlacement(
        state=row["state"],
        generation=row["generation"],
        spec=row["spec"],
        cancel_requested_at=row["cancel_requested_at"],
        allocations=row["allocations"],
        ports_in_use=row["ports_in_use"],
    )


async def insert_attempt(conn: Connection, attempt: NewAttempt, event: TaskAssigned) -> bool:
    """A new ASSIGNED attempt with its event; False if the task already has one."""
    inserted = await append_with_change(conn, SQL.insert_attempt, attempt, event, aggregate=attempt.job_id)
    return inserted is not None


async def attempts_of_generation(conn: Connection, job_id: str, generation: int) -> list[AttemptOutcome]:
    """The attempts of one generation of the job, ended ones first (by end), then by id."""
    return [
        AttemptOutcome(
            id=r["id"],
            task_role=r["task_role"],
            task_index=r["task_index"],
            node_id=r["node_id"],
            state=r["state"],
            exit_code=r["exit_code"],
            classification=r["classification"],
            reason=r["reason"],
            stop_requested=r["stop_requested_at"] is not None,
            finished_at=r["finished_at"],
        )
        for r in await conn.fetch(SQL.attempts_of_generation, job_id, generation)
    ]


async def set_job_state(
    conn: Connection, job_id: str, state: str, exit_code: int | None, reason: str | None, event: Envelope
) -> None:
    """The job's new state (its row locked by the caller, so the update changes it), with
    its event."""
    await append_with_change(
        conn, SQL.set_job_state, (job_id, state, exit_code, reason), event, aggregate=job_id
    )


async def requeue_job(conn: Connection, job_id: str, retries: int, delay_s: float, reason: str) -> datetime:
    """The job back to PENDING, not to be placed before ``delay_s``; returns when it may."""
    not_before: datetime = await conn.fetchval(SQL.requeue_job, job_id, retries, delay_s, reason)
    return not_before


async def stop_unstarted(conn: Connection, attempt_id: str, reason: str) -> None:
    """End an attempt no node has claimed yet: it never ran."""
    await conn.fetchval(SQL.stop_unstarted, attempt_id, reason)


async def request_stop(conn: Connection, attempt_id: str, reason: str, platform: str | None) -> str | None:
    """Record a stop request for a started attempt; its node, or None when it was asked
    already or ended meanwhile."""
    node_id: str | None = await conn.fetchval(SQL.request_stop, attempt_id, reason, platform)
    return node_id


async def mark_attempt_lost(conn: Connection, attempt_id: str, reason: str) -> EndedAttempt | None:
    """A live attempt ended as LOST; None if it had ended already."""
    row = await conn.fetchrow(SQL.mark_attempt_lost, attempt_id, reason)
    return None if row is None else EndedAttempt(row["job_id"], row["node_id"])


# --- what the reconcile loop looks for -------------------------------------------------


async def declare_lost_agents(conn: Connection, lease_s: float) -> list[LostAgent]:
    """Fence the agents whose lease ran out (not within ``lease_s`` of Postgres' start)."""
    return [
        LostAgent(row["node_id"], row["lease_expires_at"])
        for row in await conn.fetch(SQL.declare_lost_agents, lease_s)
    ]


async def live_attempts_on_lost_nodes(db: Database) -> list[LiveAttempt]:
    return [
        LiveAttempt(row["id"], row["job_id"], row["node_id"], row["lease_expires_at"])
        for row in await db.fetch(SQL.live_attempts_on_lost_nodes)
    ]


async def scheduled_jobs_without_attempts(db: Database) -> list[tuple[str, int]]:
    """(job, generation) of the SCHEDULED jobs whose generation has no attempt yet."""
    return [(row["id"], row["generation"]) for row in await db.fetch(SQL.scheduled_jobs_without_attempts)]


async def active_jobs_to_evaluate(db: Database) -> list[str]:
    """The placed jobs whose attempts may call for a decision (one ended, a cancel or a
    preemption asked)."""
    return [row["id"] for row in await db.fetch(SQL.active_jobs_to_evaluate)]


# --- a node's part, as the Kubernetes runner plays it (each statement on its own) --------


async def mark_attempt_running(
    db: Database,
    attempt_id: str,
    node_id: str,
    pid: int | None,
    pid_start_ticks: int | None,
    log_path: str | None,
    started: TaskStarted,
    job_running: JobRunning,
) -> asyncpg.Record | None:
    """STARTING → RUNNING, only on ``node_id``, with ``started``; the job's first task to
    run also makes the job RUNNING with ``job_running``. None when the attempt was not
    this node's to start any more; else ``consequence_rows`` (whether the job changed
    too), ``in_state_s`` and ``age_s``."""
    return await change_with_event(
        db,
        SQL.mark_attempt_running,
        (attempt_id, node_id, pid, pid_start_ticks, log_path),
        started,
        aggregate=started.data.job_id,
        then=Consequence(SQL.job_running_with_its_first_task, job_running),
    )


async def mark_attempt_exited(db: Database, *, lost: bool, exited: TaskExited) -> bool:
    """The attempt's end, only if its node still runs it, with ``exited``; False when it
    was not that node's to report any more."""
    data = exited.data
    changed = await change_with_event(
        db,
        SQL.mark_attempt_exited,
        (
            data.attempt_id,
            data.node_id,
            "LOST" if lost else "EXITED",
            data.exit_code,
            data.signal,
            data.reason,
            data.classification,
        ),
        exited,
        aggregate=data.job_id,
    )
    return changed is not None


async def nodes_to_run(conn: Connection, pattern: str) -> list[str]:
    """The nodes the monitor knows whose id matches ``pattern`` (a regular expression)."""
    return [row["id"] for row in await conn.fetch(SQL.nodes_to_run, pattern)]


async def renew_lease(conn: Connection, node_id: str, epoch: int, lease_s: float) -> bool:
    """False when the lease of that epoch was lost meanwhile."""
    return await conn.fetchval(SQL.renew_lease, node_id, epoch, lease_s) is not None


async def register_agent(
    conn: Connection, node_id: str, lease_s: float, isolation: str, isolation_detail: str, machine_cpus: int
) -> int:
    """A new lease epoch for the node: whatever an earlier holder held is fenced."""
    epoch = await conn.fetchval(
        SQL.register_agent, node_id, lease_s, isolation, isolation_detail, machine_cpus
    )
    return int(epoch)


async def claim_attempt(db: Database, attempt_id: str, node_id: str, epoch: int) -> dict[str, Any] | None:
    """ASSIGNED → STARTING (fenced by the lease's epoch), with what the task needs to
    start; None when it is not to be started."""
    row = await db.fetchrow(SQL.claim_attempt, attempt_id, node_id, epoch)
    return None if row is None else dict(row)


async def set_readiness(db: Database, attempt_id: str, node_id: str, ready: bool, detail: str) -> bool:
    """Record a running replica's readiness; False once it is not RUNNING on ``node_id``."""
    return await db.fetchval(SQL.set_attempt_readiness, attempt_id, node_id, ready, detail) is not None


async def attempt_for_report(db: Database, attempt_id: str) -> asyncpg.Record | None:
    """What reporting the attempt needs: its node and state, its job's spec, its log."""
    return await db.fetchrow(SQL.attempt_for_report, attempt_id)


async def live_attempts_on_nodes(db: Database, node_ids: list[str]) -> list[asyncpg.Record]:
    """The attempts ASSIGNED, STARTING or RUNNING on these nodes, with their jobs' specs."""
    return await db.fetch(SQL.live_attempts_on_nodes, node_ids)


async def expired_task_logs(
    db: Database,
    job_ids: Sequence[str],
    roles: Sequence[str],
    indexes: Sequence[int],
    attempt_nos: Sequence[int],
    older_than_s: float,
) -> list[asyncpg.Record]:
    """Of these log files (one each), those whose attempt ended more than
    ``older_than_s`` ago: ``ord`` (from 1) and ``job_ended``."""
    return await db.fetch(SQL.expired_task_logs, job_ids, roles, indexes, attempt_nos, older_than_s)
