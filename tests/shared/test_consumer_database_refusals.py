"""A handler whose write Postgres refuses for a full disk is redelivered, never
dead-lettered: the event is fine, and it is handled once there is room again.

Postgres raises the error from a statement written to raise it: SQLSTATE 53100, what a
write on a full disk gets, and 57P02, what every other session gets when a backend
PANICs (a WAL write on a full disk). tests/e2e/test_disk_full.py fills a real disk.
"""

from __future__ import annotations

import asyncio

import pytest

from shared.bus import ConsumerConfig, ConsumerSpec, Delivery, run_consumer
from shared.bus.memory import MemoryBus
from shared.bus.streams import JOBS
from shared.db.pool import Database
from shared.events import Event, JobSubmitted
from shared.events.jobs import JobSubmittedData


class RecordingSink:
    def __init__(self) -> None:
        self.records: list[tuple[str, str, bytes]] = []

    async def record(self, consumer: str, delivery: Delivery, reason: str) -> None:
        self.records.append((consumer, reason, delivery.data))


@pytest.mark.slow
@pytest.mark.parametrize("sqlstate", ["53100", "57P02"], ids=["disk full", "another backend crashed"])
async def test_a_write_postgres_refuses_is_retried_past_max_deliver_and_never_dead_lettered(
    db: Database, sqlstate: str
) -> None:
    bus = MemoryBus()
    await bus.ensure_streams()
    event = JobSubmitted(
        source="test",
        subject="job-1",
        data=JobSubmittedData(job_id="job-1", name="n", user="ada", virtual_cluster="default", total_gpus=1),
    )
    await bus.publish(event.nats_subject, event.model_dump_json().encode(), msg_id=event.id)
    config = ConsumerConfig(
        stream=JOBS.name, durable="writer", filter_subjects=("corral.job.submitted.>",), max_deliver=1
    )
    handled = asyncio.Event()
    calls = 0

    async def handle(_: Event) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:  # the disk is full; then there is room
            await db.execute(
                f"DO $$ BEGIN RAISE EXCEPTION 'refused for the test' USING ERRCODE = '{sqlstate}'; END $$"
            )
        handled.set()

    sink = RecordingSink()
    task = asyncio.create_task(run_consumer(bus, ConsumerSpec(config, handle, fetch_timeout_s=0.2), sink))
    try:
        await asyncio.wait_for(handled.wait(), 15)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert calls == 2
    assert sink.records == [], "a refused write is nobody's poison"
    await bus.close()
