"""Recording what became of an attempt: the fenced state change and its event, in one
statement each (``shared.outbox.change_with_event``: atomic without a transaction, one
round trip instead of four). Shared by the node agent (processes) and the Kubernetes
runner (pods), so both report the same way.

The first task of a job to run also makes the job RUNNING, in that same statement
(``job.running`` after ``task.started``). The launcher used to do it on consuming
``task.started``: a transaction of six round trips and a NATS delivery per job, and a
moment in which a job with a running task still read SCHEDULED. Where a job ends is
still the launcher's decision (``repository.evaluate_job``): it weighs every task of
the gang against the completion rules and the retry table."""

from __future__ import annotations

from typing import Any

from services.launcher import metrics
from services.launcher.agent.environment import Peer
from services.launcher.repository import SQL
from shared.db.pool import Database
from shared.events import JobRunning, TaskExited, TaskStarted
from shared.events.jobs import JobRunningData, TaskExitedData, TaskStartedData
from shared.outbox import Consequence, change_with_event


async def report_started(
    db: Database,
    source: str,
    *,
    attempt_id: str,
    job_id: str,
    generation: int,
    node_id: str,
    pid: int | None,
    pid_start_ticks: int | None,
    log_path: str | None,
) -> bool:
    """Mark the attempt RUNNING — only if ``node_id`` holds it STARTING — and say so,
    and its job RUNNING if it was not yet; False when the attempt was not ours to start
    any more (declared lost meanwhile)."""
    event = TaskStarted(
        source=source,
        subject=attempt_id,
        data=TaskStartedData(attempt_id=attempt_id, job_id=job_id, node_id=node_id, pid=pid),
    )
    job_running = JobRunning(
        source=source, subject=job_id, data=JobRunningData(job_id=job_id, generation=generation)
    )
    changed = await change_with_event(
        db,
        SQL.mark_attempt_running,
        (attempt_id, node_id, pid, pid_start_ticks, log_path),
        event,
        aggregate=job_id,
        then=Consequence(SQL.job_running_with_its_first_task, job_running),
    )
    if changed is not None and changed["consequence_rows"]:
        metrics.LAUNCH_LATENCY.observe(float(changed["in_state_s"]))
        metrics.JOB_START_LATENCY.observe(float(changed["age_s"]))
    return changed is not None


async def report_end(
    db: Database,
    source: str,
    *,
    attempt_id: str,
    job_id: str,
    node_id: str,
    lost: bool,
    exit_code: int | None,
    signal: int | None,
    reason: str,
    classification: str,
) -> bool:
    """Mark the attempt ended — only if ``node_id`` still runs it (STARTING or RUNNING) —
    and say so; False when it was not ours to report any more."""
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
    changed = await change_with_event(
        db,
        SQL.mark_attempt_exited,
        (attempt_id, node_id, "LOST" if lost else "EXITED", exit_code, signal, reason, classification),
        event,
        aggregate=job_id,
    )
    return changed is not None


def peers_of(claimed: dict[str, Any]) -> list[Peer]:
    """Every task of the claimed attempt's generation, from ``claim_attempt``'s ``peers``."""
    return [
        Peer(p["task_role"], p["task_index"], p["node_id"], p["host"], dict(p["ports"]))
        for p in claimed["peers"] or []
    ]
