"""``corral why``'s sentence for a pending job (``explain``), and ``submit --wait``'s line
per change (``describe``), from the API's job as the SDK reads it: which of the job's
fields decides what the user is told."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from corral.commands.jobs import explain
from corral.commands.progress import describe
from corral.sdk.models import Job

NOW = datetime(2026, 11, 24, 7, 13, 40, tzinfo=UTC)


def pending_job(**fields: Any) -> Job:
    return Job.model_validate(
        {
            "id": "job-1",
            "name": "borrower",
            "user": "alice",
            "virtual_cluster": "nlp",
            "state": "PENDING",
            "created_at": NOW - timedelta(minutes=5),
            "updated_at": NOW - timedelta(seconds=7),
            **fields,
        }
    )


WAITING = {
    "reason": "InsufficientGPUs",
    "detail": "needs 8 GPUs; 4 are free on ready nodes",
    "position": 1,
    "since": NOW - timedelta(seconds=7),
    "estimated_start": None,
}


def test_a_preempted_job_is_told_why_it_waits_now_not_that_it_retries() -> None:
    # Preemption sets not_before to the moment of the stop: long past by the time anyone asks.
    job = pending_job(
        reason="preempted: reclaimed for a job within its VC's quota (job-2, VC vision)",
        not_before=NOW - timedelta(seconds=7),
        pending=WAITING,
    )
    assert explain(job, now=NOW).splitlines() == [
        "job job-1 (borrower) is PENDING: InsufficientGPUs",
        "  needs 8 GPUs; 4 are free on ready nodes",
        "  position 1 in the queue; this reason since 2026-11-24 07:13:33 UTC",
        "  no start estimate (the jobs it waits for set no max_runtime_s)",
    ]


def test_a_job_backing_off_after_a_failure_is_told_when_it_may_run_again() -> None:
    job = pending_job(
        reason="retrying: task main-0 exited with code 3",
        retries=1,
        not_before=NOW + timedelta(seconds=20),
        pending=WAITING,  # from before the back-off: the scheduler skips the job until then
    )
    assert explain(job, now=NOW) == (
        "job job-1 (borrower) is PENDING: retrying: task main-0 exited with code 3;"
        " next attempt not before 2026-11-24 07:14:00 UTC"
    )


def test_a_job_the_scheduler_has_not_seen_says_so() -> None:
    assert explain(pending_job(), now=NOW) == (
        "job job-1 (borrower) is PENDING: the scheduler has not considered it yet"
    )


def test_submit_wait_shows_each_retry_of_a_failing_task() -> None:
    """The reason of every retry reads the same; the count tells them apart."""
    lines = [
        describe(pending_job(reason="retrying: task main-0 exited with code 3", retries=n)) for n in (1, 2)
    ]
    assert lines == [
        "job-1 PENDING (retry 1): retrying: task main-0 exited with code 3",
        "job-1 PENDING (retry 2): retrying: task main-0 exited with code 3",
    ]
