"""The launcher's job-level SQL: attempts from placements, job outcomes from attempts.

Every function runs inside the caller's transaction and locks the job row first
(``FOR UPDATE``), so concurrent handlers and the reconcile loop serialise per job and
each job transition is a checked compare-and-set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shared.db.pool import Connection
from shared.db.queries import Queries
from shared.events import JobFailed, JobRunning, JobSucceeded, TaskAssigned
from shared.events.types import JobEndedData, JobRunningData, TaskAssignedData
from shared.ids import new_attempt_id
from shared.jobs import JobState
from shared.outbox import append

SQL = Queries(Path(__file__).parent / "sql")
SOURCE = "corral/launcher"
LIVE_ATTEMPT_STATES = ("ASSIGNED", "STARTING", "RUNNING")


async def _lock_job(conn: Connection, job_id: str) -> dict[str, Any] | None:
    row = await conn.fetchrow(SQL.lock_job, job_id)
    return dict(row) if row else None


async def create_attempts(conn: Connection, job_id: str, generation: int) -> int:
    """One ASSIGNED attempt per placed task instance, each announced to its node."""
    job = await _lock_job(conn, job_id)
    if job is None or job["state"] != JobState.SCHEDULED or job["generation"] != generation:
        return 0
    created = 0
    for alloc in await conn.fetch(SQL.allocations_of_generation, job_id, generation):
        attempt_id = await conn.fetchval(
            SQL.insert_attempt,
            new_attempt_id(),
            job_id,
            generation,
            alloc["task_role"],
            alloc["task_index"],
            alloc["node_id"],
            list(alloc["gpu_indices"]),
        )
        if attempt_id is None:
            continue  # already created by an earlier delivery or the reconcile loop
        event = TaskAssigned(
            source=SOURCE,
            subject=attempt_id,
            data=TaskAssignedData(
                attempt_id=attempt_id,
                job_id=job_id,
                generation=generation,
                task_role=alloc["task_role"],
                task_index=alloc["task_index"],
                node_id=alloc["node_id"],
                gpu_indices=list(alloc["gpu_indices"]),
            ),
        )
        await append(conn, event, aggregate=job_id)
        created += 1
    return created


async def _transition(
    conn: Connection,
    job: dict[str, Any],
    to: JobState,
    exit_code: int | None = None,
    reason: str | None = None,
) -> None:
    await conn.execute(SQL.set_job_state, job["id"], to.value, exit_code, reason)
    job_id, generation = job["id"], job["generation"]
    event: JobRunning | JobSucceeded | JobFailed
    if to is JobState.RUNNING:
        event = JobRunning(
            source=SOURCE, subject=job_id, data=JobRunningData(job_id=job_id, generation=generation)
        )
    else:
        data = JobEndedData(job_id=job_id, generation=generation, exit_code=exit_code, reason=reason or "")
        cls = JobSucceeded if to is JobState.SUCCEEDED else JobFailed
        event = cls(source=SOURCE, subject=job_id, data=data)
    await append(conn, event, aggregate=job_id)
    job["state"] = to


async def mark_running(conn: Connection, job_id: str) -> bool:
    job = await _lock_job(conn, job_id)
    if job is None or job["state"] != JobState.SCHEDULED:
        return False
    await _transition(conn, job, JobState.RUNNING)
    return True


async def evaluate_job(conn: Connection, job_id: str) -> JobState | None:
    """End the job once every attempt of its current generation has ended.

    The job fails with the exit code of the first task that failed (by finish time);
    it succeeds when every task exited 0. A job that ends without its RUNNING
    transition having been seen (a very short task) passes through RUNNING first, so
    the published lifecycle is always complete and in order.
    """
    job = await _lock_job(conn, job_id)
    if job is None or job["state"] not in (JobState.SCHEDULED, JobState.RUNNING):
        return None
    attempts = [dict(a) for a in await conn.fetch(SQL.attempts_of_generation, job_id, job["generation"])]
    if not attempts or any(a["state"] in LIVE_ATTEMPT_STATES for a in attempts):
        return None
    if job["state"] == JobState.SCHEDULED:
        await _transition(conn, job, JobState.RUNNING)
    failed = [a for a in attempts if a["state"] == "LOST" or a["exit_code"] != 0]
    if failed:
        first = failed[0]
        task = f"{first['task_role']}-{first['task_index']}"
        if first["state"] == "LOST":
            reason = f"task {task} was lost: {first['reason']}"
        elif first["exit_code"] is None:
            reason = f"task {task} was killed by signal {first['signal']}"
        else:
            reason = f"task {task} exited with code {first['exit_code']}"
        await _transition(conn, job, JobState.FAILED, first["exit_code"], reason)
        return JobState.FAILED
    await _transition(conn, job, JobState.SUCCEEDED, 0, "all tasks exited 0")
    return JobState.SUCCEEDED


async def reconcile(conn: Connection) -> dict[str, int]:
    """Repair what lost events left behind; returns counts of each repair."""
    repaired = {"attempts_created": 0, "marked_running": 0, "jobs_ended": 0}
    for row in await conn.fetch(SQL.scheduled_jobs_without_attempts):
        repaired["attempts_created"] += await create_attempts(conn, row["id"], row["generation"])
    for row in await conn.fetch(SQL.running_jobs_still_scheduled):
        repaired["marked_running"] += int(await mark_running(conn, row["id"]))
    for row in await conn.fetch(SQL.active_jobs_with_all_attempts_done):
        repaired["jobs_ended"] += int(await evaluate_job(conn, row["id"]) is not None)
    return repaired
