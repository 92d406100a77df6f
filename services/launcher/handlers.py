"""Event handlers of the launcher service: a placement becomes attempts; a cancel or a
preemption request stops them. (What a task's start and end mean for its job is acted
on by whoever reports them, node agent or Kubernetes runner: ``reporting.py``.)

Each runs in one transaction that first records the event as processed
(``shared.idempotency.first_time``), so redeliveries do nothing and a rolled-back
handler leaves no trace. The consumer handles several at once (one job's in order);
placements on one node take turns (``node_turns.py``) before opening theirs.
"""

from __future__ import annotations

from services.launcher.attempts import create_attempts
from services.launcher.node_turns import NodeTurns
from services.launcher.outcomes import evaluate_job
from shared.bus import ConsumerConfig
from shared.bus.streams import JOBS
from shared.db.pool import Database
from shared.events import Event, JobCancelRequested, JobPreemptRequested, JobScheduled, subjects_of
from shared.idempotency import first_time
from shared.outbox import following_others

CONSUMER = ConsumerConfig(
    stream=JOBS.name,
    durable="launcher",
    filter_subjects=subjects_of(JobScheduled, JobCancelRequested, JobPreemptRequested),
)


class LauncherHandlers:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._node_turns = NodeTurns()

    async def handle(self, event: Event) -> None:
        if isinstance(event, JobScheduled):
            async with self._node_turns.of(p.node_id for p in event.data.placements):
                await self._handle(event)
            return
        # A decision may follow a node's unpublished task.exited (shared/outbox).
        with following_others():
            await self._handle(event)

    async def _handle(self, event: Event) -> None:
        async with self._db.transaction() as conn:
            if not await first_time(conn, CONSUMER.durable, event.id):
                return
            match event:
                case JobScheduled(data=data):
                    await create_attempts(conn, data.job_id, data.generation)
                case JobCancelRequested(data=data) | JobPreemptRequested(data=data):
                    await evaluate_job(conn, data.job_id)
                case _:
                    pass  # not ours (the consumer filter makes this unreachable)
