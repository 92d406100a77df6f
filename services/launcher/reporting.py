"""Recording what became of an attempt: the fenced state change and its event, in the
caller's transaction. Shared by the node agent (processes) and the Kubernetes runner
(pods), so both report the same way."""

from __future__ import annotations

from services.launcher.repository import SQL
from shared.db.pool import Connection
from shared.events import TaskExited, TaskStarted
from shared.events.jobs import TaskExitedData, TaskStartedData
from shared.outbox import append


async def record_started(
    conn: Connection, source: str, *, attempt_id: str, job_id: str, node_id: str, pid: int | None
) -> None:
    event = TaskStarted(
        source=source,
        subject=attempt_id,
        data=TaskStartedData(attempt_id=attempt_id, job_id=job_id, node_id=node_id, pid=pid),
    )
    await append(conn, event, aggregate=job_id)


async def record_end(
    conn: Connection,
    source: str,
    *,
    attempt_id: str,
    node_id: str,
    lost: bool,
    exit_code: int | None,
    signal: int | None,
    reason: str,
    classification: str,
) -> str | None:
    """Mark the attempt ended — only if ``node_id`` still runs it (STARTING or RUNNING) —
    and say so; returns its job, or None when it was not ours to report any more."""
    job_id: str | None = await conn.fetchval(
        SQL.mark_attempt_exited,
        attempt_id,
        node_id,
        "LOST" if lost else "EXITED",
        exit_code,
        signal,
        reason,
        classification,
    )
    if job_id is None:
        return None
    event = TaskExited(
        source=source,
        subject=attempt_id,
        data=TaskExitedData(
            attempt_id=attempt_id,
            job_id=job_id,
            node_id=node_id,
            exit_code=exit_code,
            signal=signal,
            reason=reason,
            classification=classification,
        ),
    )
    await append(conn, event, aggregate=job_id)
    return job_id
