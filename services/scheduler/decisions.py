"""Committing a cycle's placements: every placed job becomes SCHEDULED with its
allocations and its ``corral.job.scheduled``, in one statement, in the cycle's
transaction (``repository.commit_placements``).

A decision joins the job's own trace (from its submit), not the cycle's. Its event is
published by the relays after a NOTIFY, or by the scheduler itself on commit, which is
sooner: only when it cannot overtake the event that made the job pending
(``_may_overtake``) — the cycle reads the job from Postgres, not from the stream, so
nothing else orders the two.
"""

from __future__ import annotations

from functools import partial

from services.scheduler import repository
from services.scheduler.model import Decision, PendingJob
from shared.db.pool import Connection, after_commit
from shared.events import JobScheduled
from shared.events.jobs import JobScheduledData, TaskPlacement
from shared.outbox import PUBLISHED_WITHIN_S, OutboxRow, notify_channel, outbox_row, relay_on_commit
from shared.telemetry import continue_trace

SOURCE = "corral/scheduler"


async def commit_decisions(conn: Connection, decisions: list[Decision]) -> int:
    """Write every placement of the cycle in one statement (``commit_placements``); the
    caller holds one transaction. How many jobs it placed: a job that changed since the
    snapshot (e.g. cancelled) is skipped."""
    if not decisions:
        return 0
    jobs: list[repository.PlacedJob] = []
    allocations: list[repository.Allocation] = []
    events: list[OutboxRow] = []
    notified: list[str] = []  # the events the relays publish, after a NOTIFY
    relay = relay_on_commit(conn)
    for decision in decisions:
        job, generation = decision.job, decision.job.generation + 1
        jobs.append((job.job_id, job.version, generation))
        allocations.extend(
            (
                job.job_id,
                generation,
                p.role,
                p.index,
                p.node_id,
                p.gpu_indices,
                decision.borrowed,
                decision.promoted,
                p.gpu_milli,
            )
            for p in decision.placements
        )
        # The decision joins the job's own trace (from its submit), not the cycle's: its
        # event carries that span's context.
        with continue_trace(job.traceparent, "schedule", _span_attributes(decision, generation)):
            events.append(outbox_row(_scheduled_event(decision, generation), job.job_id))
        if relay is None or _may_overtake(job):
            notified.append(events[-1][0])
    placed = await repository.commit_placements(
        conn, jobs, allocations, events, notified, notify_channel(SOURCE)
    )
    if relay is not None:
        through_relays = set(notified)
        on_commit = [row for row in events if row[2] in placed and row[0] not in through_relays]
        if on_commit:
            after_commit(conn, partial(relay.publish_committed, on_commit))
    return len(placed)


def _scheduled_event(decision: Decision, generation: int) -> JobScheduled:
    return JobScheduled(
        source=SOURCE,
        subject=decision.job.job_id,
        data=JobScheduledData(
            job_id=decision.job.job_id,
            generation=generation,
            placements=[
                TaskPlacement(
                    task_role=p.role,
                    task_index=p.index,
                    node_id=p.node_id,
                    gpu_indices=list(p.gpu_indices),
                    gpu_milli=p.gpu_milli,
                )
                for p in decision.placements
            ],
        ),
    )


def _span_attributes(decision: Decision, generation: int) -> dict[str, str | int | float]:
    return {
        "corral.job.id": decision.job.job_id,
        "corral.job.generation": generation,
        "corral.job.gpus": decision.job.gpus,
        "corral.job.nodes": len({p.node_id for p in decision.placements}),
        "corral.job.borrowed": int(decision.borrowed),
    }


def _may_overtake(job: PendingJob) -> bool:
    """Whether the job's ``job.scheduled``, published on commit, could reach the stream
    before the event that made it pending: its ``job.submitted`` (the API's) if it was
    submitted moments ago, or a requeue's ``job.retrying`` or ``job.preempted`` (the
    launcher's; a job requeued has a version past the submit's 1). The cycle reads the
    job from Postgres, not from the stream, so nothing else orders the two."""
    return job.version > 1 or job.waited_s < PUBLISHED_WITHIN_S
