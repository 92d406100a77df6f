"""The bus contract, run against real NATS JetStream and the in-memory bus alike."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from opentelemetry import trace
from prometheus_client import REGISTRY

from corral.local.ports import free_port
from shared.bus import ConsumerConfig, ConsumerSpec, Delivery, run_consumer
from shared.bus.memory import subject_matches
from shared.bus.nats import NatsBus
from shared.bus.protocol import Bus
from shared.bus.streams import JOBS
from shared.errors import PermanentError, TransientError
from shared.events import Event, JobSubmitted
from shared.events.jobs import JobSubmittedData
from shared.logs import current_job
from shared.settings import NatsSettings
from tests.tracing import global_tracer_provider


def _event(job: str, name: str = "hello") -> JobSubmitted:
    return JobSubmitted(
        source="test",
        subject=job,
        data=JobSubmittedData(job_id=job, name=name, user="ada", virtual_cluster="default", total_gpus=1),
    )


async def _publish(bus: Bus, event: JobSubmitted) -> None:
    await bus.publish(event.nats_subject, event.model_dump_json().encode(), msg_id=event.id)


CONFIG = ConsumerConfig(stream=JOBS.name, durable="contract", filter_subjects=("corral.job.submitted.>",))


class RecordingSink:
    def __init__(self) -> None:
        self.records: list[tuple[str, str, bytes]] = []

    async def record(self, consumer: str, delivery: Delivery, reason: str) -> None:
        self.records.append((consumer, reason, delivery.data))


async def _consume_until(bus: Bus, spec: ConsumerSpec, sink: RecordingSink, done: asyncio.Event) -> None:
    task = asyncio.create_task(run_consumer(bus, spec, sink))
    try:
        await asyncio.wait_for(done.wait(), 15)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_streams_can_be_ensured_again(any_bus: Bus) -> None:
    await any_bus.ensure_streams()
    await any_bus.ensure_streams()


async def test_duplicate_msg_id_is_delivered_once_and_events_arrive_in_order(any_bus: Bus) -> None:
    events = [_event(f"job-{i}") for i in range(5)]
    for event in events:
        await _publish(any_bus, event)
    await _publish(any_bus, events[2])  # a relay re-publishing after a crash
    seen: list[str] = []
    done = asyncio.Event()

    async def handle(event: Event) -> None:
        seen.append(event.subject)
        if len(seen) >= 5:
            done.set()

    await _consume_until(any_bus, ConsumerSpec(CONFIG, handle, fetch_timeout_s=0.2), RecordingSink(), done)
    await asyncio.sleep(0.3)
    assert seen == [e.subject for e in events]


async def test_transient_error_redelivers_after_the_delay(any_bus: Bus) -> None:
    await _publish(any_bus, _event("job-t"))
    attempts: list[float] = []
    done = asyncio.Event()

    async def handle(_: Event) -> None:
        attempts.append(asyncio.get_running_loop().time())
        if len(attempts) == 1:
            raise TransientError("database busy", delay_s=0.5)
        done.set()

    await _consume_until(any_bus, ConsumerSpec(CONFIG, handle, fetch_timeout_s=0.2), RecordingSink(), done)
    assert len(attempts) == 2
    assert attempts[1] - attempts[0] >= 0.4


async def test_poison_message_is_dead_lettered_and_the_consumer_goes_on(any_bus: Bus) -> None:
    await any_bus.publish(
        "corral.job.submitted.bad", b'{"type": "corral.job.submitted.v1"}', msg_id="poison-1"
    )
    await _publish(any_bus, _event("job-after"))
    handled: list[str] = []
    done = asyncio.Event()

    async def handle(event: Event) -> None:
        handled.append(event.subject)
        done.set()

    sink = RecordingSink()
    await _consume_until(any_bus, ConsumerSpec(CONFIG, handle, fetch_timeout_s=0.2), sink, done)
    assert handled == ["job-after"]
    assert len(sink.records) == 1
    consumer, reason, payload = sink.records[0]
    assert consumer == "contract"
    assert reason.startswith("invalid event:")
    assert "source: Field required" in reason
    assert payload == b'{"type": "corral.job.submitted.v1"}'


async def test_permanent_error_is_dead_lettered_once(any_bus: Bus) -> None:
    await _publish(any_bus, _event("job-p"))
    await _publish(any_bus, _event("job-q"))
    calls: list[str] = []
    done = asyncio.Event()

    async def handle(event: Event) -> None:
        calls.append(event.subject)
        if event.subject == "job-p":
            raise PermanentError("spec refers to a deleted virtual cluster")
        done.set()

    sink = RecordingSink()
    await _consume_until(any_bus, ConsumerSpec(CONFIG, handle, fetch_timeout_s=0.2), sink, done)
    await asyncio.sleep(0.3)
    assert calls == ["job-p", "job-q"]
    assert [r[1] for r in sink.records] == ["permanent error: spec refers to a deleted virtual cluster"]


@pytest.mark.slow
async def test_a_crashing_handler_is_retried_then_dead_lettered(any_bus: Bus) -> None:
    config = ConsumerConfig(
        stream=JOBS.name, durable="crashy", filter_subjects=("corral.job.submitted.>",), max_deliver=3
    )
    await _publish(any_bus, _event("job-c"))
    calls = 0
    sink = RecordingSink()
    done = asyncio.Event()
    before = {outcome: _consumed("crashy", outcome) for outcome in ("nacked", "dead_lettered", "redelivered")}

    async def handle(_: Event) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            asyncio.get_running_loop().call_later(0.2, done.set)
        raise RuntimeError("bug")

    await _consume_until(any_bus, ConsumerSpec(config, handle, fetch_timeout_s=0.2), sink, done)
    assert calls == 3
    assert len(sink.records) == 1
    assert "gave up after 3 deliveries" in sink.records[0][1]
    # What /metrics shows of it: two retries, each a redelivery, then the dead letter.
    after = {outcome: _consumed("crashy", outcome) for outcome in before}
    assert {k: after[k] - before[k] for k in before} == {"nacked": 2, "dead_lettered": 1, "redelivered": 2}


def _consumed(consumer: str, outcome: str) -> float:
    if outcome == "redelivered":
        value = REGISTRY.get_sample_value("corral_events_redelivered_total", {"consumer": consumer})
    else:
        value = REGISTRY.get_sample_value(
            "corral_events_consumed_total", {"consumer": consumer, "outcome": outcome}
        )
    return value or 0.0


async def test_a_durable_consumer_resumes_where_it_stopped(any_bus: Bus) -> None:
    await _publish(any_bus, _event("job-1"))
    first = await any_bus.subscribe(CONFIG)
    [delivery] = await first.fetch(10, 1.0)
    await delivery.ack()
    await _publish(any_bus, _event("job-2"))
    again = await any_bus.subscribe(CONFIG)
    deliveries = await again.fetch(10, 1.0)
    assert [d.subject for d in deliveries] == ["corral.job.submitted.job-2"]


@pytest.mark.slow
async def test_an_idle_consumer_gets_each_message_as_it_comes(any_bus: Bus) -> None:
    """Not when an earlier fetch's request expires. The sequence is the one an idle
    stack shows (a fetch that times out, then messages 300 and 30 ms into the next
    fetches): nats-py leaves a batch request behind, the server gives the next message
    to it, and a fetch that gets it waits for the rest of its batch until that request
    expires, unless the subscription sizes its requests by the backlog."""
    subscription = await any_bus.subscribe(CONFIG)
    loop = asyncio.get_running_loop()
    sent = 0
    for _ in range(4):
        assert await subscription.fetch(64, 1.0) == []  # idle: the fetch times out
        for delay_s in (0.3, 0.03, 0.03):
            fetching = asyncio.create_task(subscription.fetch(64, 1.0))
            await asyncio.sleep(delay_s)
            published = loop.time()
            sent += 1
            await _publish(any_bus, _event(f"job-{sent}"))
            [delivery] = await fetching
            waited = loop.time() - published
            assert delivery.subject == f"corral.job.submitted.job-{sent}"
            assert waited < 0.3, f"message {sent} came {waited:.2f} s after it was published"
            await delivery.ack()


async def test_a_backlog_comes_in_batches(any_bus: Bus) -> None:
    for i in range(5):
        await _publish(any_bus, _event(f"job-{i}"))
    subscription = await any_bus.subscribe(CONFIG)
    received: list[str] = []
    fetches = 0
    while len(received) < 5 and fetches < 5:
        deliveries = await subscription.fetch(64, 1.0)
        fetches += 1
        for delivery in deliveries:
            received.append(delivery.subject)
            await delivery.ack()
    assert received == [f"corral.job.submitted.job-{i}" for i in range(5)]
    assert fetches <= 2  # (NATS: one message, then the four it said were behind it)


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("corral.job.>", "corral.job.submitted.j1", True),
        ("corral.job.*.j1", "corral.job.failed.j1", True),
        ("corral.job.*", "corral.job.failed.j1", False),
        ("corral.task.assigned.n1", "corral.task.assigned.n10", False),
        ("corral.>", "corral", False),
    ],
)
def test_memory_bus_matches_subjects_like_nats(pattern: str, subject: str, expected: bool) -> None:
    assert subject_matches(pattern, subject) is expected


async def test_nats_bus_reports_an_unreachable_server() -> None:
    with pytest.raises(TransientError, match="cannot reach NATS"):
        await NatsBus.connect(NatsSettings(url=f"nats://127.0.0.1:{free_port()}", connect_timeout_s=1))


async def test_the_handler_continues_the_publishers_trace(any_bus: Bus) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    event = _event("job-traced")
    await any_bus.publish(
        event.nats_subject,
        event.model_dump_json().encode(),
        msg_id=event.id,
        headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},
    )
    seen: list[str] = []
    jobs: list[str | None] = []  # the job the handler's log lines are stamped with
    done = asyncio.Event()

    async def handle(_: Event) -> None:
        seen.append(format(trace.get_current_span().get_span_context().trace_id, "032x"))
        jobs.append(current_job())
        done.set()

    spec = ConsumerSpec(CONFIG, handle, fetch_timeout_s=0.2)
    with global_tracer_provider():
        await _consume_until(any_bus, spec, RecordingSink(), done)
    assert seen == [trace_id]
    assert jobs == ["job-traced"]


async def test_a_durable_made_anew_from_a_start_time_gets_what_was_stored_since(any_bus: Bus) -> None:
    """What a paused consumer resumes with (the webhook fan-in): delete it, then create it
    again from a moment in the past; it replays from there, not from its old position."""
    config = ConsumerConfig(
        stream=JOBS.name, durable="from-a-time", filter_subjects=("corral.job.>",), deliver_all=False
    )
    await _publish(any_bus, _event("job-old"))
    await asyncio.sleep(0.05)
    since = datetime.now(UTC)
    await asyncio.sleep(0.05)
    await _publish(any_bus, _event("job-1"))
    await _publish(any_bus, _event("job-2"))
    await any_bus.delete_consumer(JOBS.name, "from-a-time")  # none yet: nothing to do
    sub = await any_bus.subscribe(replace(config, start_time=since))
    got = list(await sub.fetch(10, 1.0))
    got += await sub.fetch(10, 0.3)  # (a first fetch may ask for one: its backlog is unknown)
    assert [d.subject for d in got] == ["corral.job.submitted.job-1", "corral.job.submitted.job-2"]
    for delivery in got:
        await delivery.ack()

    await any_bus.delete_consumer(JOBS.name, "from-a-time")
    again = await any_bus.subscribe(config)  # anew, at "new": nothing stored before
    assert await again.fetch(10, 0.3) == []
    await _publish(any_bus, _event("job-3"))
    assert [d.subject for d in await again.fetch(10, 1.0)] == ["corral.job.submitted.job-3"]


async def test_a_durable_asked_for_again_from_another_start_goes_on_from_where_it_was(any_bus: Bus) -> None:
    """An API restarted after its webhook fan-in resumed from a time asks for that durable
    at "new" again: it keeps its place, and the events after it are still delivered
    (NATS refuses to change a durable's start: an API that asked for that would crash-loop)."""
    config = ConsumerConfig(
        stream=JOBS.name, durable="made-from-a-time", filter_subjects=("corral.job.>",), deliver_all=False
    )
    since = datetime.now(UTC)
    await asyncio.sleep(0.05)
    await _publish(any_bus, _event("job-1"))
    await _publish(any_bus, _event("job-2"))
    await any_bus.subscribe(replace(config, start_time=since))
    again = await any_bus.subscribe(config)
    got = list(await again.fetch(10, 1.0))
    got += await again.fetch(10, 0.3)
    assert [d.subject for d in got] == ["corral.job.submitted.job-1", "corral.job.submitted.job-2"]
