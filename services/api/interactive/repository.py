"""The interactive slice's SQL: the job and attempt a session goes into, and the audit rows
of sessions (``api.interactive_sessions``, migration 0029).

Nothing here decides who may open what (``access.py``, ``targets.py``): it reads and
writes rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from shared.db.pool import Database
from shared.db.queries import Queries

SQL = Queries(Path(__file__).parent / "sql")


@dataclass(frozen=True, slots=True)
class SessionJob:
    """A job as a session into it needs it."""

    id: str
    username: str
    state: str
    spec: dict[str, Any]
    generation: int
    virtual_cluster: str
    interactive: bool  # its VC lets owners in


@dataclass(frozen=True, slots=True)
class TaskAttempt:
    """The latest attempt of a task: where it runs and the ports it was given, by label."""

    id: str
    node_id: str
    state: str
    ports: dict[str, list[int]]
    generation: int
    attempt_no: int


@dataclass(frozen=True, slots=True)
class NewSession:
    """A session about to be recorded; ``connected`` for one that opens at once (proxy)."""

    id: str
    kind: str
    job_id: str
    task_role: str
    task_index: int
    attempt_id: str
    node_id: str
    username: str
    token_id: str
    credential_sha256: str
    command: list[str]
    tty: bool
    stdin: bool
    cols: int
    rows: int
    port_label: str
    port: int
    connected: bool = False


@dataclass(frozen=True, slots=True)
class ClaimedSession:
    """A session whose WebSocket just connected: what the stream is opened with."""

    id: str
    kind: str
    job_id: str
    task_role: str
    task_index: int
    attempt_id: str
    node_id: str
    username: str
    command: list[str]
    tty: bool
    stdin: bool
    cols: int
    rows: int
    port_label: str
    port: int


@dataclass(frozen=True, slots=True)
class SessionState:
    """What a session row says, when its WebSocket was refused."""

    credential_sha256: str
    connected_at: datetime | None
    closed_at: datetime | None
    created_at: datetime
    too_late: bool


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One audit row."""

    id: str
    kind: str
    job_id: str
    task_role: str
    task_index: int
    attempt_id: str
    node_id: str
    username: str
    token_id: str
    command: list[str]
    port_label: str
    created_at: datetime
    connected_at: datetime | None
    closed_at: datetime | None
    close_reason: str | None
    exit_code: int | None
    bytes_in: int
    bytes_out: int


class InteractiveRepository:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def job(self, job_id: str) -> SessionJob | None:
        row = await self.db.fetchrow(SQL.job_for_session, job_id)
        return SessionJob(**row) if row is not None else None

    async def latest_attempt(self, job_id: str, role: str, index: int) -> TaskAttempt | None:
        row = await self.db.fetchrow(SQL.latest_attempt_of_task, job_id, role, index)
        return TaskAttempt(**row) if row is not None else None

    async def insert(self, s: NewSession) -> datetime:
        """Record the session; returns when it was asked for."""
        created: datetime = await self.db.fetchval(
            SQL.insert_session,
            s.id,
            s.kind,
            s.job_id,
            s.task_role,
            s.task_index,
            s.attempt_id,
            s.node_id,
            s.username,
            s.token_id,
            s.credential_sha256,
            s.command,
            s.tty,
            s.stdin,
            s.cols,
            s.rows,
            s.port_label,
            s.port,
            s.connected,
        )
        return created

    async def claim_connection(
        self, session_id: str, credential_sha256: str, within_s: float
    ) -> ClaimedSession | None:
        """Mark the session connected, if it may connect now with this credential; None if not."""
        row = await self.db.fetchrow(SQL.claim_connection, session_id, credential_sha256, within_s)
        return ClaimedSession(**row) if row is not None else None

    async def state(self, session_id: str, within_s: float) -> SessionState | None:
        row = await self.db.fetchrow(SQL.session_state, session_id, within_s)
        return SessionState(**row) if row is not None else None

    async def record_close(
        self, session_id: str, reason: str, exit_code: int | None, bytes_in: int, bytes_out: int
    ) -> None:
        await self.db.execute(SQL.record_close, session_id, reason, exit_code, bytes_in, bytes_out)

    async def sessions(self, job_id: str | None, owner: str | None, limit: int) -> list[SessionRow]:
        """Newest first: into ``job_id`` (None: any job), into ``owner``'s jobs (None: anyone's)."""
        return [SessionRow(**r) for r in await self.db.fetch(SQL.list_sessions, job_id, owner, limit)]

    async def forget_old(self, retention_s: float, batch: int = 10_000) -> int:
        """Delete every row older than the retention, ``batch`` rows a statement; how many."""
        return await self.db.delete_in_batches(SQL.forget_old_sessions, retention_s, batch=batch)
