"""A job's ``job.scheduled`` never reaches the stream before its ``job.submitted``.

The scheduler publishes what its cycle commits as soon as it commits (shared/outbox/),
but the cycle reads pending jobs from Postgres, not from the stream: a job submitted
moments ago may be placed before the API has published its event. Such a decision goes
through a relay pass instead, which publishes the partition's unsent rows in order.
Real Postgres, real NATS, the real cycle; the API's relay is not running, so its event
stays unsent until the scheduler's relay pass publishes it first (a service's relay
publishes only its own rows, and these: shared/outbox/rows.MAY_PRECEDE).
"""

from __future__ import annotations

import asyncio

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.scheduler.cycle import Cycle
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.jobs import JobSpec
from shared.outbox import OutboxRelay, publishing_on_commit
from tests.scheduler.test_queue_order import _ready_node

SPEC = JobSpec.model_validate(
    {"name": "t", "tasks": [{"name": "main", "command": "x", "resources": {"gpus": 1}}]}
)


async def _subjects(bus: NatsBus, count: int) -> list[str]:
    sub = await bus.js.subscribe("corral.job.>", ordered_consumer=True)
    try:
        return [(await sub.next_msg(timeout=5)).subject.rsplit(".", 1)[0] for _ in range(count)]
    finally:
        await sub.unsubscribe()


async def test_a_job_placed_moments_after_its_submit_is_announced_first(
    db: Database, bus: NatsBus, cycle: Cycle
) -> None:
    await _ready_node(db, gpus=1)
    relay = OutboxRelay(db, bus, source="corral/scheduler", poll_interval_s=30)  # no poll in time
    with publishing_on_commit(relay):
        task = asyncio.create_task(relay.run())
    try:
        await asyncio.sleep(0.3)  # its first (full) pass is over, and it listens
        # Submitted outside the relay's context: its event stays unsent (no relay hears
        # the API's channel), as if the API had not published it yet.
        await Submitter(JobRepository(db)).submit(SPEC, "alice", None)
        with publishing_on_commit(relay):
            assert await cycle.run_once() == 1
        assert await _subjects(bus, 2) == ["corral.job.submitted", "corral.job.scheduled"]
        for _ in range(200):  # (counted once the pass has stamped it)
            if relay.published == 1:
                break
            await asyncio.sleep(0.01)
        # Both went out in the pass the decision's NOTIFY woke; the scheduler's relay
        # stamps (and counts) only its own row: the API's is its own relay's to stamp.
        assert relay.published == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_job_that_waited_is_announced_on_commit(db: Database, bus: NatsBus, cycle: Cycle) -> None:
    """Its submit's event left long ago: its decision does not wait for a relay pass."""
    await _ready_node(db, gpus=1)
    job = (await Submitter(JobRepository(db)).submit(SPEC, "alice", None)).job
    await db.execute("UPDATE api.jobs SET created_at = now() - interval '1 minute' WHERE id = $1", job.id)
    await OutboxRelay(db, bus).relay_pending()  # job.submitted, published
    relay = OutboxRelay(db, bus, source="corral/scheduler", poll_interval_s=30)
    notifications: list[object] = []

    def heard(*args: object) -> None:
        notifications.append(args)

    async with db.connection() as listener:
        await listener.add_listener("corral_outbox_scheduler", heard)
        with publishing_on_commit(relay):
            task = asyncio.create_task(relay.run())
            try:
                await asyncio.sleep(0.3)
                assert await cycle.run_once() == 1
                assert await _subjects(bus, 2) == ["corral.job.submitted", "corral.job.scheduled"]
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await listener.remove_listener("corral_outbox_scheduler", heard)
    assert relay.published == 1
    assert notifications == []
