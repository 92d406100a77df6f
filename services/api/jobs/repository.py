"""The jobs slice's SQL: jobs as submitted, their secrets and idempotency keys, cancels,
and the reads of jobs, attempts and what a task's log needs.

Nothing here decides: a submit's checks, the idempotency rules and what a cancel does in
each state are in ``submission.py``, ``idempotency.py`` and ``cancellation.py``, which
run the statements that must commit together on one connection (``transaction``,
``JobWrites``). ``vc_user`` arguments name the user whom VC access lists apply to (None:
an admin, who may use every VC).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from services.api import SOURCE
from services.api.audit import AuditEntry
from shared.db.pool import Connection, Database
from shared.db.queries import Queries
from shared.events import Event
from shared.jobs import JobSpec
from shared.outbox import append, committed_by_statement, outbox_row, statement_notify_channel
from shared.telemetry import current_traceparent

SQL = Queries(Path(__file__).parent / "sql")


@dataclass(frozen=True, slots=True)
class JobRow:
    id: str
    name: str
    username: str
    virtual_cluster: str
    priority: int
    spec: dict[str, Any]
    state: str
    version: int
    generation: int
    exit_code: int | None
    reason: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    retries: int
    not_before: datetime | None
    tags: list[str]
    # Why it waits, while PENDING and once the scheduler has considered it (reads only).
    pending_reason: str | None = None
    pending_detail: str | None = None
    pending_position: int | None = None
    pending_since: datetime | None = None
    pending_estimated_start: datetime | None = None


@dataclass(frozen=True, slots=True)
class AttemptRow:
    id: str
    generation: int
    task_role: str
    task_index: int
    attempt_no: int
    node_id: str
    host: str
    ports: dict[str, list[int]]
    gpu_indices: list[int]
    state: str
    exit_code: int | None
    signal: int | None
    reason: str
    classification: str | None
    stop_reason: str | None
    log_path: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    gpu_memory_used_mb: int | None = None  # a sharer's use of its GPU, as its node last read it


@dataclass(frozen=True, slots=True)
class LogAttempt:
    """What the API needs to ask an attempt's node for its log (``logs.py``)."""

    id: str
    job_id: str
    task_role: str
    task_index: int
    attempt_no: int
    node_id: str
    state: str
    log_path: str | None
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class NodeLease:
    """Since when a node's agent has been silent: it renews its lease while it runs."""

    lease_expires_at: datetime
    lost_at: datetime | None


@dataclass(frozen=True, slots=True)
class LockedJob:
    id: str
    username: str
    state: str
    version: int
    generation: int
    cancel_requested_at: datetime | None


@dataclass(frozen=True, slots=True)
class IdempotencyRow:
    request_sha256: str
    job_id: str


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job about to be stored as PENDING."""

    id: str
    spec: JobSpec
    username: str
    tags: list[str] | None = None

    def values(self) -> tuple[Any, ...]:
        """The parameters of ``insert_job`` (and the first nine of ``submit_job_at_once``)."""
        spec = self.spec
        return (
            self.id,
            spec.name,
            self.username,
            spec.virtual_cluster,
            spec.priority,
            spec.model_dump(mode="json"),
            spec.total_gpus,
            current_traceparent(),
            self.tags,
        )


class JobWrites:
    """The statements of one transaction, on its connection (``JobRepository.transaction``)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def vc_usable(self, virtual_cluster: str, vc_user: str | None) -> bool | None:
        """Whether ``vc_user`` may submit to the VC (None: no such VC), holding the VC FOR
        SHARE so it cannot be deleted under the transaction."""
        usable = await self.conn.fetchval(SQL.vc_for_submit, virtual_cluster, vc_user)
        return None if usable is None else bool(usable)

    async def claim_idempotency_key(
        self, username: str, key: str, digest: str, job_id: str, retention_s: float
    ) -> bool:
        """Claim the key for ``job_id``; False when a live key holds it (waiting, if that
        key's transaction is still open, until it commits or rolls back)."""
        claimed = await self.conn.fetchval(
            SQL.claim_idempotency_key, username, key, digest, job_id, retention_s
        )
        return claimed is not None

    async def idempotency_key(self, username: str, key: str) -> IdempotencyRow | None:
        row = await self.conn.fetchrow(SQL.idempotency_key, username, key)
        return IdempotencyRow(**row) if row is not None else None

    async def get_job(self, job_id: str) -> JobRow | None:
        row = await self.conn.fetchrow(SQL.get_job, job_id)
        return JobRow(**row) if row is not None else None

    async def insert_job(self, job: NewJob) -> JobRow:
        row = await self.conn.fetchrow(SQL.insert_job, *job.values())
        assert row is not None
        return JobRow(**row)

    async def insert_secrets(self, job_id: str, secrets: dict[str, str]) -> None:
        await self.conn.execute(SQL.insert_job_secrets, job_id, list(secrets), list(secrets.values()))

    async def copy_secrets(self, from_job: str, to_job: str) -> None:
        await self.conn.execute(SQL.copy_job_secrets, from_job, to_job)

    async def lock_job(self, job_id: str) -> LockedJob | None:
        row = await self.conn.fetchrow(SQL.lock_job, job_id)
        return LockedJob(**row) if row is not None else None

    async def cancel_pending(self, job_id: str, requested_by: str) -> None:
        await self.conn.execute(SQL.cancel_pending_job, job_id, requested_by)

    async def request_cancel(self, job_id: str) -> None:
        await self.conn.execute(SQL.request_cancel, job_id)

    async def append(self, event: Event, aggregate: str) -> None:
        """The event, in the outbox, committed with the rest of the transaction."""
        await append(self.conn, event, aggregate=aggregate)


class JobRepository:
    def __init__(self, db: Database) -> None:
        self.db = db

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[JobWrites]:
        async with self.db.transaction() as conn:
            yield JobWrites(conn)

    async def submit_at_once(
        self, job: NewJob, vc_user: str | None, event: Event, audit: tuple[AuditEntry, int] | None
    ) -> JobRow | None:
        """Store the job, its event and (with ``audit``: the call's entry and status) its
        audit row in one statement, if the VC exists and ``vc_user`` may use it; None
        (nothing stored) otherwise."""
        entry, status = audit if audit is not None else (None, None)
        event_row = outbox_row(event, job.id)
        channel = statement_notify_channel(SOURCE)
        row = await self.db.fetchrow(
            SQL.submit_job_at_once,
            *job.values(),
            vc_user,
            *event_row,
            channel,
            *(
                (entry.username, entry.token_id, entry.method, entry.route, status, entry.client)
                if entry is not None
                else (None,) * 6
            ),
        )
        if row is None:
            return None
        if channel is None:
            committed_by_statement([event_row])
        return JobRow(**row)

    async def sweep_idempotency_keys(self, retention_s: float) -> None:
        """Forget a bounded batch of expired keys."""
        await self.db.execute(SQL.sweep_idempotency_keys, retention_s)

    async def get_job(self, job_id: str) -> JobRow | None:
        row = await self.db.fetchrow(SQL.get_job, job_id)
        return JobRow(**row) if row is not None else None

    async def list_jobs(
        self,
        states: list[str] | None,
        virtual_cluster: str | None,
        username: str | None,
        name: str | None,
        tags: list[str] | None,
        since: datetime | None,
        until: datetime | None,
        after: tuple[datetime, str] | None,
        limit: int,
    ) -> list[JobRow]:
        """Newest first; every filter given must hold (``tags``: all of them); ``after``:
        the jobs older than that (created_at, id)."""
        rows = await self.db.fetch(
            SQL.list_jobs,
            states,
            virtual_cluster,
            username,
            name,
            tags,
            since,
            until,
            after[0] if after else None,
            after[1] if after else None,
            limit,
        )
        return [JobRow(**row) for row in rows]

    async def set_job_tags(self, job_id: str, tags: list[str]) -> list[str]:
        return list(await self.db.fetchval(SQL.set_job_tags, job_id, tags))

    async def attempts_of_job(self, job_id: str) -> list[AttemptRow]:
        return [AttemptRow(**row) for row in await self.db.fetch(SQL.attempts_of_job, job_id)]

    async def attempt_for_logs(
        self, job_id: str, role: str, index: int, attempt_no: int | None
    ) -> LogAttempt | None:
        """The task's attempt ``attempt_no``, or its latest when None."""
        row = await self.db.fetchrow(SQL.latest_attempt_of_task, job_id, role, index, attempt_no)
        return LogAttempt(**row) if row is not None else None

    async def attempt_state(self, attempt_id: str) -> str | None:
        state = await self.db.fetchval(SQL.attempt_state, attempt_id)
        return None if state is None else str(state)

    async def node_lease(self, node_id: str) -> NodeLease | None:
        """None when no agent of the node ever registered."""
        row = await self.db.fetchrow(SQL.node_last_heard, node_id)
        return NodeLease(**row) if row is not None else None

    async def cluster_shape(self) -> list[tuple[int, str | None, float, int, bool]]:
        """(GPU count, GPU model, CPUs, memory MiB, runs images) of every registered node,
        ready or not."""
        rows = await self.db.fetch(SQL.cluster_shape)
        return [(r["gpus"], r["model"], r["cpus"], r["memory_mb"], r["runs_images"]) for r in rows]
