"""What a cancel does, by the job's state.

A pending job is cancelled at once (``job.cancelled``); a job that holds GPUs is asked
to stop (``job.cancel_requested``: the launcher stops its tasks, SIGTERM then SIGKILL,
and the job ends ``CANCELLED``); a job that already ended is a conflict. Asking again
while a stop is under way changes nothing, so a cancel may be repeated. The job row is
locked for the decision, so a cancel and the scheduler's placement never both win.
"""

from __future__ import annotations

from collections.abc import Callable

from services.api import SOURCE
from services.api.jobs.repository import JobRepository
from shared.errors import Conflict, NotFound
from shared.events import JobCancelled, JobCancelRequested
from shared.events.jobs import JobCancelRequestedData, JobEndedData
from shared.jobs import JobState


async def cancel_job(
    repo: JobRepository, job_id: str, requested_by: str, may_cancel: Callable[[str], bool]
) -> None:
    """Cancel at once if PENDING; otherwise ask the launcher to stop the tasks.

    ``may_cancel`` is asked with the job's owner: ``NotFound`` for a job the caller may
    not see, ``Conflict`` for one that already ended.
    """
    async with repo.transaction() as tx:
        job = await tx.lock_job(job_id)
        if job is None or not may_cancel(job.username):
            raise NotFound(f"no job with id {job_id!r}; list your jobs with GET /api/v1/jobs")
        state = JobState(job.state)
        if state.is_terminal:
            raise Conflict(f"job {job_id} already ended {state.value}; there is nothing to cancel")
        if state is JobState.PENDING:
            await tx.cancel_pending(job_id, requested_by)
            event: JobCancelled | JobCancelRequested = JobCancelled(
                source=SOURCE,
                subject=job_id,
                data=JobEndedData(
                    job_id=job_id, generation=job.generation, reason=f"cancelled by {requested_by}"
                ),
            )
        elif job.cancel_requested_at is None:
            await tx.request_cancel(job_id)
            event = JobCancelRequested(
                source=SOURCE,
                subject=job_id,
                data=JobCancelRequestedData(job_id=job_id, requested_by=requested_by),
            )
        else:
            return  # already requested: the launcher is on it
        await tx.append(event, aggregate=job_id)
