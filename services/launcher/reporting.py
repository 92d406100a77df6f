"""Recording what became of an attempt: the fenced state change and its event, in one
statement each. The events are built here (``started_events``, ``exited_event``), so the
node agent and the Kubernetes runner say the same thing; how they are written differs.
The runner, in the launcher, runs the queries itself (``report_started``,
``report_end``, through ``repository.py``: ``shared.outbox.change_with_event``, atomic
without a transaction, one round trip instead of four). A node agent, whose database
role may touch no table, hands them to its node's functions (``agent/repository.py``),
which check they are about its own attempt.

The first task of a job to run also makes the job RUNNING, in that same statement
(``job.running`` after ``task.started``). Once an attempt's end is recorded, the job is
decided (``outcomes.evaluate_job``: the completion rules, the retry table, stopping
the rest of a gang) in a transaction of its own, by the launcher: at once by the
runner (``decide_job``), and for an agent's report as soon as its NOTIFY arrives
(``attempt_ends.py``). Should the decision fail (Postgres away, the process killed in
between, a NOTIFY missed), the launcher's reconcile loop takes it
(``active_jobs_to_evaluate``), within its interval.
"""

from __future__ import annotations

import logging
from typing import Any

from services.launcher import metrics, repository
from services.launcher.agent.environment import Peer
from services.launcher.outcomes import evaluate_job
from shared.aio import raise_if_cancelling
from shared.db.pool import DATABASE_ERRORS, Database
from shared.events import JobRunning, TaskExited, TaskStarted
from shared.events.jobs import JobRunningData, TaskExitedData, TaskStartedData

log = logging.getLogger(__name__)


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
    event, job_running = started_events(
        source, attempt_id=attempt_id, job_id=job_id, generation=generation, node_id=node_id, pid=pid
    )
    changed = await repository.mark_attempt_running(
        db, attempt_id, node_id, pid, pid_start_ticks, log_path, event, job_running
    )
    if changed is not None and changed["consequence_rows"]:
        note_job_running(changed["in_state_s"], changed["age_s"])
    return changed is not None


def started_events(
    source: str, *, attempt_id: str, job_id: str, generation: int, node_id: str, pid: int | None
) -> tuple[TaskStarted, JobRunning]:
    """``task.started`` for the attempt, and ``job.running`` should it be its job's first."""
    event = TaskStarted(
        source=source,
        subject=attempt_id,
        data=TaskStartedData(attempt_id=attempt_id, job_id=job_id, node_id=node_id, pid=pid),
    )
    job_running = JobRunning(
        source=source, subject=job_id, data=JobRunningData(job_id=job_id, generation=generation)
    )
    return event, job_running


def note_job_running(in_state_s: float, age_s: float) -> None:
    """A job went RUNNING with this report: how long it was SCHEDULED, and its age."""
    metrics.LAUNCH_LATENCY.observe(float(in_state_s))
    metrics.JOB_START_LATENCY.observe(float(age_s))


def exited_event(
    source: str,
    *,
    attempt_id: str,
    job_id: str,
    node_id: str,
    exit_code: int | None,
    signal: int | None,
    reason: str,
    classification: str,
) -> TaskExited:
    return TaskExited(
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
    and say so, then decide the job (``decide_job``); False when it was not ours to
    report any more."""
    event = exited_event(
        source,
        attempt_id=attempt_id,
        job_id=job_id,
        node_id=node_id,
        exit_code=exit_code,
        signal=signal,
        reason=reason,
        classification=classification,
    )
    if not await repository.mark_attempt_exited(db, lost=lost, exited=event):
        return False
    metrics.TASK_EXITS.labels(classification).inc()
    await decide_job(db, job_id)
    return True


async def decide_job(db: Database, job_id: str) -> None:
    """What the job's attempts add up to now that one has ended, acted on in a
    transaction of its own (it locks the job, then its attempts: the launcher's order).
    A failure is logged and left to the launcher's reconcile loop: the end itself is
    recorded, and a report must not be retried for a decision's sake (nor a NOTIFY
    handled again: ``attempt_ends.py``)."""
    try:
        async with db.transaction() as conn:
            await evaluate_job(conn, job_id)
    except DATABASE_ERRORS as exc:
        raise_if_cancelling()
        log.warning("could not decide job %s (%s); the launcher's reconcile loop will", job_id, exc)
    except Exception:
        raise_if_cancelling()
        log.exception("could not decide job %s; the launcher's reconcile loop will try", job_id)


def peers_of(claimed: dict[str, Any]) -> list[Peer]:
    """Every task of the claimed attempt's generation, from ``claim_attempt``'s ``peers``."""
    return [
        Peer(p["task_role"], p["task_index"], p["node_id"], p["host"], dict(p["ports"]))
        for p in claimed["peers"] or []
    ]
