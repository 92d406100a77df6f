"""The event hub's fan-out in batches, on real NATS: events that arrive together reach a
stream together, in order, in one chunk; an SSE frame's bytes stay what clients parse."""

from __future__ import annotations

import asyncio

from services.api.events.hub import Cursor, StreamEvent
from services.api.events.routes import frame
from services.api.events.scope import EventFacts
from shared.bus.nats import NatsBus
from shared.events import JobSubmitted
from shared.events.jobs import JobSubmittedData
from tests.fixtures.api import Api


def _submitted(number: int) -> JobSubmitted:
    job_id = f"job-fanout{number:04d}"
    data = JobSubmittedData(
        job_id=job_id, name="train", user="admin", virtual_cluster="default", total_gpus=1
    )
    return JobSubmitted(source="corral/test", subject=job_id, data=data)


async def test_a_burst_reaches_a_waiting_stream_whole_and_in_order(api: Api, bus: NatsBus) -> None:
    subscriber = api.hub.register(lambda _: True)
    try:
        sent = [_submitted(n) for n in range(9)]  # the fixture's hub queues at most 10
        acks = await asyncio.gather(
            *(bus.js.publish(e.nats_subject, e.model_dump_json().encode()) for e in sent)
        )
        last = max(ack.seq for ack in acks)
        received: list[StreamEvent] = []
        batches = 0
        while not received or received[-1].seq < last:
            batch = await subscriber.next_batch(5.0)
            assert batch, "the burst did not arrive"
            received += batch
            batches += 1
        assert [e.seq for e in received] == sorted(ack.seq for ack in acks)
        assert [e.facts.job_id for e in received] == [e.data.job_id for e in sent]
        # Taken from NATS together and handed over together, not one event per wake-up.
        assert batches <= 4, batches
    finally:
        api.hub.unregister(subscriber)


async def test_an_idle_stream_gets_an_empty_batch_after_its_timeout(api: Api) -> None:
    subscriber = api.hub.register(lambda _: True)
    try:
        assert await subscriber.next_batch(0.05) == []
    finally:
        api.hub.unregister(subscriber)


def test_a_frame_is_id_event_and_one_data_line_per_payload_line() -> None:
    facts = EventFacts("corral.job.submitted.v1", "job-1", "alice", "default", "owner")
    event = StreamEvent(0, 7, b'{"a": 1,\n "b": 2}', facts)
    expected = b'id: 7.0.0\nevent: corral.job.submitted.v1\ndata: {"a": 1,\ndata:  "b": 2}\n\n'
    assert frame(event, Cursor((7, 0, 0))) == expected
    # Made once per event, the same bytes for the next stream with its own cursor.
    assert frame(event, Cursor((7, 3, 1))) == expected.replace(b"7.0.0", b"7.3.1")
