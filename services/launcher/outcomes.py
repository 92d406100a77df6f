"""What a job's attempts add up to, and acting on it: the job's next state, stop
requests for the rest of a gang, a retry or a preemption back to the queue.

Every function runs inside the caller's transaction and locks the job row first
(``FOR UPDATE``), so concurrent handlers and the reconcile loop serialise per job and
each job transition is a checked compare-and-set. The completion rules themselves are
pure code (``completion.py``); this module applies them.
"""

from __future__ import annotations

from datetime import datetime

from services.launcher import metrics, repository, service_restarts
from services.launcher.artifacts.commit import commit_job_outputs
from services.launcher.completion import AttemptOutcome, Verdict, evaluate, retry_delay_s
from services.launcher.job_keys import forget_job_keys, has_job_keys
from services.launcher.repository import LockedJob
from shared.db.pool import Connection
from shared.events import (
    JobCancelled,
    JobFailed,
    JobPreempted,
    JobRetrying,
    JobRunning,
    JobSucceeded,
    TaskStopRequested,
)
from shared.events.jobs import (
    JobEndedData,
    JobPreemptionData,
    JobRetryingData,
    JobRunningData,
    TaskStopRequestedData,
)
from shared.jobs import JobSpec, JobState, check_transition
from shared.outbox import append

SOURCE = "corral/launcher"
STOP_GRACE_S = 10.0


async def _transition(
    conn: Connection,
    job: LockedJob,
    to: JobState,
    exit_code: int | None = None,
    reason: str | None = None,
) -> None:
    check_transition(JobState(job.state), to, "launcher")
    job_id, generation = job.id, job.generation
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
    # The job is locked (``lock_job``), so the update changes its row: the event goes with it.
    await repository.set_job_state(conn, job_id, to.value, exit_code, reason, event)
    if to is not JobState.RUNNING:
        metrics.JOBS_ENDED.labels(to.value).inc()
        if has_job_keys(job.spec):
            await forget_job_keys(conn, job_id)
    job.state = to


async def _attempts(conn: Connection, job: LockedJob) -> list[AttemptOutcome]:
    return await repository.attempts_of_generation(conn, job.id, job.generation)


async def request_stop(
    conn: Connection, job_id: str, attempt: AttemptOutcome, reason: str, platform: str | None = None
) -> None:
    """Ask the attempt's node to stop it (SIGTERM, then SIGKILL after the grace period)."""
    if attempt.state == "ASSIGNED":
        await repository.stop_unstarted(conn, attempt.id, reason)
        return
    node_id = await repository.request_stop(conn, attempt.id, reason, platform)
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
    putting the job back to PENDING; otherwise the job FAILS. A service replica (``kind:
    service``) neither succeeds nor fails: whatever ended it, it restarts, after a delay
    that grows while it keeps crashing (``service_restarts.py``). A job that ends before any
    of its tasks ran (none could start, or its node was lost while starting: the first
    to run makes it RUNNING, ``reporting.report_started``) passes through RUNNING first,
    so the published lifecycle is always complete and in order.
    """
    job = await repository.lock_job(conn, job_id)
    if job is None or job.state not in (JobState.SCHEDULED, JobState.RUNNING):
        return None
    attempts = await _attempts(conn, job)
    if job.cancel_requested_at is not None:
        for attempt in attempts:
            if attempt.live:
                await request_stop(conn, job_id, attempt, "job cancelled")
        if any(a.live for a in await _attempts(conn, job)):
            return None
        await _transition(conn, job, JobState.CANCELLED, None, "cancelled by request")
        return JobState.CANCELLED

    if job.preempt_reason is not None:
        reason = f"preempted: {job.preempt_reason}"
        for attempt in attempts:
            if attempt.live:
                await request_stop(conn, job_id, attempt, reason, platform="preempted")
        if any(a.live for a in await _attempts(conn, job)):
            return None
        await _requeue_preempted(conn, job, job.preempt_reason, reason)
        return JobState.PENDING

    spec = JobSpec.model_validate(job.spec)
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

    if job.state == JobState.SCHEDULED:
        await _transition(conn, job, JobState.RUNNING)
    if service_restarts.is_service(spec):
        await _restart_service(conn, job, spec, outcome.decisive or _last_ended(attempts))
        return JobState.PENDING
    if outcome.verdict is Verdict.SUCCEED:
        # Its artifacts in the same transaction; outputs that cannot be kept fail the job.
        unkept = await commit_job_outputs(conn, job.id, job.generation, spec)
        if unkept is not None:
            await _transition(conn, job, JobState.FAILED, None, unkept)
            return JobState.FAILED
        await _transition(conn, job, JobState.SUCCEEDED, 0, "all tasks completed")
        return JobState.SUCCEEDED
    exit_code, reason = _failure_reason(outcome.decisive)
    classification = (outcome.decisive.classification if outcome.decisive else None) or "unknown"
    retries = job.retries
    if classification == "transient" or (classification == "unknown" and retries < spec.retry.max_retries):
        counted = retries + (1 if classification == "unknown" else 0)
        delay = retry_delay_s(retries, spec.retry.backoff_s, spec.retry.max_backoff_s)
        await _requeue(conn, job, counted, delay, classification, f"retrying: {reason}")
        return JobState.PENDING
    if classification == "unknown" and spec.retry.max_retries:
        reason = f"{reason}; gave up after {retries} retries"
    await _transition(conn, job, JobState.FAILED, exit_code, f"{reason} ({classification})")
    return JobState.FAILED


def _last_ended(attempts: list[AttemptOutcome]) -> AttemptOutcome | None:
    ended = [a for a in attempts if not a.live]
    return ended[-1] if ended else None


async def _restart_service(
    conn: Connection, job: LockedJob, spec: JobSpec, ended: AttemptOutcome | None
) -> None:
    """A service replica's end, whatever it was, is a restart (``service_restarts.py``)."""
    _, said = _failure_reason(ended)
    crashes, delay = await service_restarts.next_restart(conn, spec, job.retries, ended)
    classification = (ended.classification if ended else None) or "unknown"
    reason = service_restarts.restart_reason(said, crashes, delay)
    await _requeue(conn, job, crashes, delay, classification, reason)


async def _requeue_preempted(conn: Connection, job: LockedJob, preempt_reason: str, reason: str) -> None:
    """Back to the queue at once, retries not counted: the platform took the GPUs."""
    data = JobPreemptionData(job_id=job.id, generation=job.generation, reason=preempt_reason)
    await _back_to_pending(conn, job, job.retries, 0.0, reason)
    await append(conn, JobPreempted(source=SOURCE, subject=job.id, data=data), aggregate=job.id)


async def _requeue(
    conn: Connection, job: LockedJob, retries: int, delay_s: float, classification: str, reason: str
) -> None:
    """Back to the queue after a retryable failure, not before ``delay_s``."""
    not_before = await _back_to_pending(conn, job, retries, delay_s, reason)
    data = JobRetryingData(
        job_id=job.id,
        generation=job.generation,
        retries=retries,
        classification=classification,
        reason=reason,
        not_before=not_before,
    )
    await append(conn, JobRetrying(source=SOURCE, subject=job.id, data=data), aggregate=job.id)


async def _back_to_pending(
    conn: Connection, job: LockedJob, retries: int, delay_s: float, reason: str
) -> datetime:
    """The one PENDING-again transition; returns when the job may be placed again."""
    check_transition(JobState(job.state), JobState.PENDING, "launcher")
    not_before = await repository.requeue_job(conn, job.id, retries, delay_s, reason)
    job.state = JobState.PENDING
    return not_before
