"""A consumer handling several messages at once (``ConsumerSpec.concurrency``): different
jobs' messages overlap, up to the limit; one job's are handled one at a time, in order.
Real NATS and the in-memory bus."""

from __future__ import annotations

import asyncio

import pytest

from shared.bus import ConsumerConfig, ConsumerSpec, Delivery, run_consumer
from shared.bus.protocol import Bus
from shared.bus.streams import JOBS
from shared.events import Event, JobSubmitted
from shared.events.jobs import JobSubmittedData

CONFIG = ConsumerConfig(stream=JOBS.name, durable="side-by-side", filter_subjects=("corral.job.submitted.>",))


class NoDeadLetters:
    async def record(self, consumer: str, delivery: Delivery, reason: str) -> None:
        raise AssertionError(f"{consumer} dead-lettered {delivery.subject}: {reason}")


async def test_different_jobs_overlap_up_to_the_limit_and_each_jobs_stay_in_order(any_bus: Bus) -> None:
    sent = [("job-a", "1"), ("job-b", "1"), ("job-a", "2"), ("job-c", "1"), ("job-a", "3"), ("job-b", "2")]
    for job, name in sent:
        event = JobSubmitted(
            source="test",
            subject=job,
            data=JobSubmittedData(job_id=job, name=name, user="ada", virtual_cluster="default", total_gpus=1),
        )
        await any_bus.publish(event.nats_subject, event.model_dump_json().encode(), msg_id=event.id)
    in_flight: list[str] = []
    overlaps: list[str] = []  # (an assert in the handler would only nak the message)
    most_at_once = 0
    handled: list[tuple[str, str]] = []
    done = asyncio.Event()

    async def handle(event: Event) -> None:
        nonlocal most_at_once
        assert isinstance(event, JobSubmitted)
        job = event.data.job_id
        if job in in_flight:
            overlaps.append(job)
        in_flight.append(job)
        most_at_once = max(most_at_once, len(in_flight))
        await asyncio.sleep(0.1)  # a handler waiting on Postgres
        in_flight.remove(job)
        handled.append((job, event.data.name))
        if len(handled) == len(sent):
            done.set()

    spec = ConsumerSpec(CONFIG, handle, fetch_timeout_s=0.2, concurrency=2)
    task = asyncio.create_task(run_consumer(any_bus, spec, NoDeadLetters()))
    try:
        await asyncio.wait_for(done.wait(), 15)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert overlaps == [], "two messages of one job were handled at once"
    assert most_at_once == 2
    for job in ("job-a", "job-b", "job-c"):
        assert [n for j, n in handled if j == job] == [n for j, n in sent if j == job]
