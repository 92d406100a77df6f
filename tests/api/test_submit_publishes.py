"""A submit's event leaves with the submit: the API publishes the row its one-statement
submit committed itself, with no NOTIFY and no relay pass (shared/outbox/)."""

from __future__ import annotations

import asyncio

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.events import JobSubmitted
from shared.jobs import JobSpec
from shared.outbox import OutboxRelay, notify_channel, publishing_on_commit

SPEC = JobSpec.model_validate(
    {"name": "t", "tasks": [{"name": "main", "command": "x", "resources": {"gpus": 1}}]}
)


async def test_the_one_statement_submit_publishes_its_event_once_it_has_committed(
    db: Database, bus: NatsBus
) -> None:
    relay = OutboxRelay(db, bus, source="corral/api", poll_interval_s=30)  # no poll in time
    notifications: list[object] = []

    def heard(*args: object) -> None:
        notifications.append(args)

    sub = await bus.js.subscribe("corral.job.submitted.>", ordered_consumer=True)
    async with db.connection() as listener:
        await listener.add_listener(notify_channel("corral/api"), heard)
        with publishing_on_commit(relay):
            task = asyncio.create_task(relay.run())
            try:
                await asyncio.sleep(0.3)  # its first pass
                job = (await Submitter(JobRepository(db)).submit(SPEC, "alice", None)).job
                msg = await sub.next_msg(timeout=5)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await listener.remove_listener(notify_channel("corral/api"), heard)
    await sub.unsubscribe()
    assert JobSubmitted.model_validate_json(msg.data).data.job_id == job.id
    assert relay.published == 1
    assert notifications == []
