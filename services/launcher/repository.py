"""The launcher's job-level decisions: attempts from placements, outcomes from attempts.

Every function runs inside the caller's transaction and locks the job row first
(``FOR UPDATE``), so concurrent handlers and the reconcile loop serialise per job and
each job transition is a checked compare-and-set. The decisions themselves are pure
code (``completion.py``); this module applies them.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from services.launcher import metrics
from services.launcher.completion import AttemptOutcome, Verdict, evaluate, retry_delay_s
from shared.aio import raise_if_cancelling
from shared.db.pool import DATABASE_ERRORS, Connection, Database
from shared.db.queries import Queries
from shared.events import (
    JobCancelled,
    JobFailed,
    JobPreempted,
    JobRetrying,
    JobRunning,
    JobSucceeded,
    TaskAssigned,
    TaskExited,
    TaskStopRequested,
)
from shared.events.jobs import (
    JobEndedData,
    JobPreemptionData,
    JobRetryingData,
    JobRunningData,
    TaskAssignedData,
    TaskExitedData,
    TaskStopRequestedData,
)
from shared.ids import new_attempt_id
from shared.jobs import JobSpec, JobState, check_transition
from shared.outbox import append, append_with_change

SQL = Queries(Path(__file__).parent / "sql")
SOURCE = "corral/launcher"
log = logging.getLogger(__name__)
# Ports handed to tasks: below Linux's default ephemeral range (32768-60999), from which
# the kernel picks the local port of every outgoing connection on the node, and below
# Kubernetes' NodePort range (30000-32767), which kube-proxy captures on a node that is
# also in a cluster. (30000-40000 overlapped the first: a DDP rendezvous failed with
# EADDRINUSE when a client socket of the same machine held the master port.)
PORT_RANGE = range(20000, 30000)
MASTER_PORT_LABEL = "master"
STOP_GRACE_S = 10.0


async def _lock_job(conn: Connection, job_id: str) -> dict[str, Any] | None:
    row = await conn.fetchrow(SQL.lock_job, job_id)
    return dict(row) if row else None


def free_ports(node_id: str, count: int, taken: set[int]) -> list[int]:
    """``count`` ports of ``PORT_RANGE`` not in ``taken`` (those live attempts hold on the
    node, and those given out already), from a random point on; added to ``taken``."""
    if count == 0:
        return []
    start = random.randrange(len(PORT_RANGE))  # noqa: S311 - spreading, not security
    free = []
    for offset in range(len(PORT_RANGE)):
        port = PORT_RANGE[(start + offset) % len(PORT_RANGE)]
        if port not in taken:
            free.append(port)
            taken.add(port)
            if len(free) == count:
                return free
    raise RuntimeError(f"no free ports left on node {node_id}")


async def create_attempts(conn: Connection, job_id: str, generation: int) -> int:
    """One ASSIGNED attempt per placed task instance, each announced to its node.

    Ports are allocated here, per node, so every task can be told every other task's
    address before any of them starts: the role's labelled ports, plus a ``master``
    port for the job's first task (the PyTorch rendezvous).
    """
    job = await conn.fetchrow(SQL.lock_job_with_allocations, job_id, generation)
    if (
        job is None
        or job["state"] != JobState.SCHEDULED
        or job["generation"] != generation
        or job["cancel_requested_at"] is not None
    ):
        return 0
    spec = JobSpec.model_validate(job["spec"])
    roles = {role.name: role for role in spec.tasks}
    first = (spec.tasks[0].name, 0)
    taken = {node_id: set(ports) for node_id, ports in job["ports_in_use"].items()}
    created = 0
    for alloc in job["allocations"]:
        role = roles[alloc["task_role"]]
        labels = dict(role.ports)
        if (alloc["task_role"], alloc["task_index"]) == first:
            labels[MASTER_PORT_LABEL] = 1
        node_taken = taken.setdefault(alloc["node_id"], set())
        ports = free_ports(alloc["node_id"], sum(labels.values()), node_taken)
        by_label = {}
        for label, count in labels.items():
            by_label[label], ports = ports[:count], ports[count:]
        attempt_id = new_attempt_id()
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
                gpu_indices=alloc["gpu_indices"],
            ),
        )
        inserted = await append_with_change(
            conn,
            SQL.insert_attempt,
            (
                attempt_id,
                job_id,
                generation,
                alloc["task_role"],
                alloc["task_index"],
                alloc["node_id"],
                alloc["gpu_indices"],
                alloc["host"],
                by_label,
            ),
            event,
            aggregate=job_id,
        )
        if inserted is None:
            continue  # already created by an earlier delivery or the reconcile loop
        created += 1
    return created


async def _transition(
    conn: Connection,
    job: dict[str, Any],
    to: JobState,
    exit_code: int | None = None,
    reason: str | None = None,
) -> None:
    check_transition(JobState(job["state"]), to, "launcher")
    job_id, generation = job["id"], job["generation"]
    event: JobRunning | JobSucceeded | JobFailed | JobCancelled
    if to is JobState.RUNNING:
        event = JobRunning(
            source=SOURCE, subject=job_id, data=JobRunningData(job_id=job_id, generation=generation)
        )
    else:
        data = JobEndedData(job_id=job_id, generation=generation, exit_code=exit_code, reason=reason or "")
        ended: dict[JobState, type[JobSucceeded | JobFailed | JobCancelled]] = {
            JobState.SUCCEEDED: JobSucceeded,
            JobState.FAILED: JobFailed,
            JobState.CANCELLED: JobCancelled,
        }
        event = ended[to](source=SOURCE, subject=job_id, data=data)
    # The job is locked (``_lock_job``), so the update changes its row: the event goes with it.
    await append_with_change(
        conn, SQL.set_job_state, (job_id, to.value, exit_code, reason), event, aggregate=job_id
    )
    if to is not JobState.RUNNING:
        metrics.JOBS_ENDED.labels(to.value).inc()
    job["state"] = to


async def _attempts(conn: Connection, job: dict[str, Any]) -> list[AttemptOutcome]:
    rows = await conn.fetch(SQL.attempts_of_generation, job["id"], job["generation"])
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
        for r in rows
    ]


async def request_stop(
    conn: Connection, job_id: str, attempt: AttemptOutcome, reason: str, platform: str | None = None
) -> None:
    """Ask the attempt's node to stop it (SIGTERM, then SIGKILL after the grace period)."""
    if attempt.state == "ASSIGNED":
        await conn.fetchval(SQL.stop_unstarted, attempt.id, reason)
        return
    node_id = await conn.fetchval(SQL.request_stop, attempt.id, reason, platform)
    if node_id is None:
        return  # already asked, or it ended meanwhile
    event = TaskStopRequested(
        source=SOURCE,
        subject=attempt.id,
        data=TaskStopRequestedData(
            attempt_id=attempt.id,
            job_id=job_id,
            node_id=node_id,
            reason=reason,
            grace_s=STOP_GRACE_S,
            platform=platform,
        ),
    )
    await append(conn, event, aggregate=job_id)


def _task(attempt: AttemptOutcome) -> str:
    return f"{attempt.task_role}-{attempt.task_index}"


def _failure_reason(attempt: AttemptOutcome | None) -> tuple[int | None, str]:
    if attempt is None:
        return None, "tasks ended without completing"
    if attempt.state == "LOST":
        return None, f"task {_task(attempt)} was lost: {attempt.reason}"
    if attempt.exit_code is None:
        return None, f"task {_task(attempt)} ended: {attempt.reason or 'killed'}"
    said = f"task {_task(attempt)} exited with code {attempt.exit_code}"
    if attempt.reason and not attempt.reason.startswith("exited with code"):
        said += f": {attempt.reason}"  # what the code means: its memory limit, a missing command
    return attempt.exit_code, said


async def evaluate_job(conn: Connection, job_id: str) -> JobState | None:
    """Decide what the job's attempts add up to, and act on it.

    Cancel wins over everything; then the completion rules. A decided job first stops
    its remaining tasks and becomes final only once every attempt has ended. A failure
    is retried when the exit-code table says so (``transient``: always, not counted;
    ``unknown``: up to ``retry.max_retries``, counted), with exponential backoff, by
    putting the job back to PENDING; otherwise the job FAILS. A job that ends before any
    of its tasks ran (none could start, or its node was lost while starting: the first
    to run makes it RUNNING, ``reporting.report_started``) passes through RUNNING first,
    so the published lifecycle is always complete and in order.
    """
    job = await _lock_job(conn, job_id)
    if job is None or job["state"] not in (JobState.SCHEDULED, JobState.RUNNING):
        return None
    attempts = await _attempts(conn, job)
    if job["cancel_requested_at"] is not None:
        for attempt in attempts:
            if attempt.live:
                await request_stop(conn, job_id, attempt, "job cancelled")
        if any(a.live for a in await _attempts(conn, job)):
            return None
        await _transition(conn, job, JobState.CANCELLED, None, "cancelled by request")
        return JobState.CANCELLED

    if job["preempt_reason"] is not None:
        reason = f"preempted: {job['preempt_reason']}"
        for attempt in attempts:
            if attempt.live:
                await request_stop(conn, job_id, attempt, reason, platform="preempted")
        if any(a.live for a in await _attempts(conn, job)):
            return None
        await _requeue_preempted(conn, job, reason)
        return JobState.PENDING

    spec = JobSpec.model_validate(job["spec"])
    outcome = evaluate(spec, attempts)
    if outcome.verdict is Verdict.CONTINUE:
        return None
    if outcome.live:
        why = (
            "the job succeeded"
            if outcome.verdict is Verdict.SUCCEED
            else _failure_reason(outcome.decisive)[1]
        )
        for attempt in outcome.live:
            await request_stop(conn, job_id, attempt, f"stopping the rest of the gang: {why}")
        if any(a.live for a in await _attempts(conn, job)):
            return None

    if job["state"] == JobState.SCHEDULED:
        await _transition(conn, job, JobState.RUNNING)
    if outcome.verdict is Verdict.SUCCEED:
        await _transition(conn, job, JobState.SUCCEEDED, 0, "all tasks completed")
        return JobState.SUCCEEDED
    exit_code, reason = _failure_reason(outcome.decisive)
    classification = (outcome.decisive.classification if outcome.decisive else None) or "unknown"
    retries = job["retries"]
    if classification == "transient" or (classification == "unknown" and retries < spec.retry.max_retries):
        counted = retries + (1 if classification == "unknown" else 0)
        delay = retry_delay_s(retries, spec.retry.backoff_s, spec.retry.max_backoff_s)
        await _requeue(conn, job, counted, delay, classification, f"retrying: {reason}")
        return JobState.PENDING
    if classification == "unknown" and spec.retry.max_retries:
        reason = f"{reason}; gave up after {retries} retries"
    await _transition(conn, job, JobState.FAILED, exit_code, f"{reason} ({classification})")
    return JobState.FAILED


async def _requeue_preempted(conn: Connection, job: dict[str, Any], reason: str) -> None:
    """Back to the queue at once, retries not counted: the platform took the GPUs."""
    data = JobPreemptionData(job_id=job["id"], generation=job["generation"], reason=job["preempt_reason"])
    await _back_to_pending(conn, job, job["retries"], 0.0, reason)
    await append(conn, JobPreempted(source=SOURCE, subject=job["id"], data=data), aggregate=job["id"])


async def _requeue(
    conn: Connection, job: dict[str, Any], retries: int, delay_s: float, classification: str, reason: str
) -> None:
    """Back to the queue after a retryable failure, not before ``delay_s``."""
    not_before = await _back_to_pending(conn, job, retries, delay_s, reason)
    data = JobRetryingData(
        job_id=job["id"],
        generation=job["generation"],
        retries=retries,
        classification=classification,
        reason=reason,
        not_before=not_before,
    )
    await append(conn, JobRetrying(source=SOURCE, subject=job["id"], data=data), aggregate=job["id"])


async def _back_to_pending(
    conn: Connection, job: dict[str, Any], retries: int, delay_s: float, reason: str
) -> datetime:
    """The one PENDING-again transition; returns when the job may be placed again."""
    check_transition(JobState(job["state"]), JobState.PENDING, "launcher")
    not_before: datetime = await conn.fetchval(SQL.requeue_job, job["id"], retries, delay_s, reason)
    job["state"] = JobState.PENDING
    return not_before


async def declare_lost_nodes(db: Database, lease_s: float = 15.0) -> int:
    """Fence agents whose lease expired and end their nodes' live attempts as LOST.

    LOST is ``transient`` in the exit-code table: the job is retried (not counted) and
    the scheduler, which places only on nodes with a live agent lease, puts it elsewhere.
    Returns how many attempts were declared lost.
    """
    async with db.transaction() as conn:
        for row in await conn.fetch(SQL.declare_lost_agents, lease_s):
            log.warning(
                "node %s lost: its agent's lease expired at %s", row["node_id"], row["lease_expires_at"]
            )
    lost = 0
    for row in await db.fetch(SQL.live_attempts_on_lost_nodes):
        reason = (
            f"node {row['node_id']} lost: its agent's lease expired at {row['lease_expires_at']:%H:%M:%S}"
        )
        async with db.transaction() as conn:
            # Job row first, as every handler does: the same lock order (no deadlock), and
            # the TaskExited event is ordered after whatever the job's handlers committed.
            await _lock_job(conn, row["job_id"])
            ended = await conn.fetchrow(SQL.mark_attempt_lost, row["id"], reason)
            if ended is None:
                continue
            event = TaskExited(
                source=SOURCE,
                subject=row["id"],
                data=TaskExitedData(
                    attempt_id=row["id"],
                    job_id=ended["job_id"],
                    node_id=ended["node_id"],
                    exit_code=None,
                    reason=reason,
                    classification="transient",
                ),
            )
            await append(conn, event, aggregate=ended["job_id"])
            await evaluate_job(conn, ended["job_id"])
            lost += 1
    return lost


async def reconcile(db: Database, lease_s: float = 15.0) -> dict[str, int]:
    """Repair what lost events left behind; returns counts of each repair.

    Each job is repaired in its own transaction, and a job whose repair fails is logged
    and skipped: one bad job must not stop the launcher from repairing all the others.
    """
    repaired = {"attempts_lost": await declare_lost_nodes(db, lease_s)}
    repaired |= {"attempts_created": 0, "jobs_decided": 0, "failed": 0}
    repairs: list[tuple[str, str, Callable[[Connection], Awaitable[int]]]] = []
    for row in await db.fetch(SQL.scheduled_jobs_without_attempts):
        repairs.append(
            ("attempts_created", row["id"], partial(_create, job_id=row["id"], generation=row["generation"]))
        )
    for row in await db.fetch(SQL.active_jobs_to_evaluate):
        repairs.append(("jobs_decided", row["id"], partial(_decide, job_id=row["id"])))
    for kind, job_id, repair in repairs:
        try:
            async with db.transaction() as conn:
                repaired[kind] += await repair(conn)
        except DATABASE_ERRORS:
            raise  # the database itself is in trouble (or we are cancelled): the caller decides
        except Exception:
            raise_if_cancelling()
            log.exception("could not repair job %s (%s); skipping it this round", job_id, kind)
            repaired["failed"] += 1
    return repaired


async def _create(conn: Connection, *, job_id: str, generation: int) -> int:
    return await create_attempts(conn, job_id, generation)


async def _decide(conn: Connection, *, job_id: str) -> int:
    return int(await evaluate_job(conn, job_id) is not None)
