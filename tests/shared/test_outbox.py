"""The transactional outbox and its relay, against real Postgres and real NATS."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest
from opentelemetry import trace
from prometheus_client import REGISTRY

from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.events import JobSubmitted
from shared.outbox import (
    OutboxRelay,
    append,
    partition_of,
)
from shared.outbox.relay import _RELAY_LOCK_CLASS
from shared.settings import NatsSettings
from tests.shared.outbox_helpers import Abort, append_then_fail, make_event, stream_messages
from tests.tracing import global_tracer_provider


async def test_append_needs_the_callers_transaction(db: Database) -> None:
    async with db.connection() as conn:
        with pytest.raises(RuntimeError, match="inside the transaction"):
            await append(conn, make_event("job-1"), aggregate="job-1")


async def test_a_rolled_back_change_leaves_no_event(db: Database) -> None:
    with pytest.raises(Abort):
        await append_then_fail(db, "job-1")
    assert await db.fetchrow("SELECT 1 FROM corral.outbox") is None


async def test_relay_publishes_with_msg_id_and_traceparent_then_marks_sent(
    db: Database, bus: NatsBus
) -> None:
    published_before = _sample("corral_events_published_total", type="job.submitted")
    lags_before = _sample("corral_outbox_lag_seconds_count")
    with global_tracer_provider() as spans:
        with trace.get_tracer("test").start_as_current_span("submit") as span:
            async with db.transaction() as conn:
                event = make_event("job-1")
                await append(conn, event, aggregate="job-1")
            trace_id = format(span.get_span_context().trace_id, "032x")
        relay = OutboxRelay(db, bus)
        assert await relay.relay_pending() == 1
    [(subject, data, headers)] = await stream_messages(bus)
    assert subject == "corral.job.submitted.job-1"
    assert headers["Nats-Msg-Id"] == event.id
    # The envelope keeps the submit's context; the header carries the relay's PRODUCER
    # span, a child of the submit, which the consumer continues.
    assert trace_id in JobSubmitted.model_validate_json(data).traceparent  # type: ignore[operator]
    [send] = [s for s in spans.get_finished_spans() if s.name == "send corral.job.submitted"]
    assert send.kind is trace.SpanKind.PRODUCER
    assert send.parent is not None
    assert send.parent.span_id == span.get_span_context().span_id
    assert headers["traceparent"].startswith(f"00-{trace_id}-{send.context.span_id:016x}-")
    assert send.attributes is not None
    assert send.attributes["messaging.message.id"] == event.id
    assert _sample("corral_events_published_total", type="job.submitted") == published_before + 1
    assert _sample("corral_outbox_lag_seconds_count") == lags_before + 1
    assert _sample("corral_outbox_unsent_events") == 0  # what the pass sent is no longer counted
    assert _sample("corral_outbox_oldest_unsent_seconds") == 0
    row = await db.fetchrow("SELECT sent_at FROM corral.outbox")
    assert row is not None
    assert row["sent_at"] is not None
    assert await relay.relay_pending() == 0


async def test_concurrent_relays_keep_each_jobs_events_in_order_without_duplicates(
    db: Database, bus: NatsBus
) -> None:
    jobs = [f"job-{i}" for i in range(6)]
    expected: dict[str, list[str]] = defaultdict(list)

    async def writer(job: str) -> None:
        for step in range(25):
            async with db.transaction() as conn:
                await append(conn, make_event(job, f"step-{step}"), aggregate=job)
            expected[job].append(f"step-{step}")
            await asyncio.sleep(0)

    relays = [OutboxRelay(db, bus, batch_size=7) for _ in range(3)]

    async def relay_loop(relay: OutboxRelay, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await relay.relay_pending()
            await asyncio.sleep(0.001)
        await relay.relay_pending()

    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        loops = [tg.create_task(relay_loop(relay, stop)) for relay in relays]
        await asyncio.gather(*(writer(job) for job in jobs))
        stop.set()
        await asyncio.gather(*loops)
    for relay in relays:
        await relay.relay_pending()

    seen: dict[str, list[str]] = defaultdict(list)
    for _, data, _ in await stream_messages(bus):
        event = JobSubmitted.model_validate_json(data)
        seen[event.data.job_id].append(event.data.name)
    assert seen == expected
    assert sum(r.published for r in relays) == 6 * 25
    assert sum(1 for r in relays if r.published) >= 2, "the relays should have shared the work"


async def test_rows_wait_while_nats_is_down_and_go_out_when_it_is_back(db: Database, nats_url: str) -> None:
    bus = await NatsBus.connect(NatsSettings(url=nats_url))
    await bus.ensure_streams()
    async with db.transaction() as conn:
        await append(conn, make_event("job-1"), aggregate="job-1")
    await bus.nc.close()  # the relay's connection is gone
    relay = OutboxRelay(db, bus)
    assert await relay.relay_pending() == 0
    row = await db.fetchrow("SELECT sent_at FROM corral.outbox")
    assert row is not None
    assert row["sent_at"] is None

    again = await NatsBus.connect(NatsSettings(url=nats_url))
    try:
        assert await OutboxRelay(db, again).relay_pending() == 1
        assert len(await stream_messages(again)) == 1
    finally:
        await again.close()


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_running_relay_publishes_what_a_notify_names_without_waiting_for_its_poll(
    db: Database, bus: NatsBus
) -> None:
    relay = OutboxRelay(db, bus, source="test", poll_interval_s=30)  # a poll would come too late
    task = asyncio.create_task(relay.run())
    try:
        await asyncio.sleep(0.3)  # its first (full) pass, and it listens
        async with db.transaction() as conn:
            await append(conn, make_event("job-a"), aggregate="job-a")
            await append(conn, make_event("job-b"), aggregate="job-b")  # most likely another partition
        for _ in range(100):
            if relay.published == 2:
                break
            await asyncio.sleep(0.02)
        assert relay.published == 2
        assert sorted(subject for subject, _, _ in await stream_messages(bus)) == [
            "corral.job.submitted.job-a",
            "corral.job.submitted.job-b",
        ]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_claim_tells_a_partition_held_by_another_relay_from_one_with_nothing_left(
    db: Database, bus: NatsBus
) -> None:
    """Held elsewhere: None, and the relay looks again soon with a full (counting) pass;
    emptied already (most NOTIFYs under load name a partition just relayed): 0, and no
    pass at all."""
    relay = OutboxRelay(db, bus)
    part = partition_of("job-a", "test")
    async with db.transaction() as conn:
        await append(conn, make_event("job-a"), aggregate="job-a")
    assert await relay._relay_partition(part) == 1
    assert await relay._relay_partition(part) == 0  # nothing left: not contention
    async with db.transaction() as conn:
        await append(conn, make_event("job-a", "again"), aggregate="job-a")
    async with db.transaction() as other_relay:
        await other_relay.execute("SELECT pg_advisory_xact_lock($1, $2)", _RELAY_LOCK_CLASS, part)
        assert await relay._relay_partition(part) is None  # held: the row waits for its holder
    assert await relay._relay_partition(part) == 1
    assert relay.published == 2


async def test_the_poll_takes_a_row_whose_notify_never_came_once_it_is_a_poll_interval_old(
    db: Database, bus: NatsBus
) -> None:
    """Not sooner: younger rows are in flight with the relay their NOTIFY woke, and every
    relay taking them on every poll would have them all contending for the same partitions."""
    async with db.transaction() as conn:  # before any relay listens: its first pass takes it
        await append(conn, make_event("job-early"), aggregate="job-early")
    relay = OutboxRelay(db, bus, source="test", poll_interval_s=0.5)
    task = asyncio.create_task(relay.run())

    async def published(count: int) -> None:
        for _ in range(500):
            if relay.published >= count:
                return
            await asyncio.sleep(0.01)

    try:
        await published(1)  # its first pass is done, and it listens
        assert relay.published == 1
        unheard = make_event("job-x").model_copy(update={"source": "corral/elsewhere"})  # another channel
        written = asyncio.get_running_loop().time()  # before the row's own clock starts
        async with db.transaction() as conn:
            await append(conn, unheard, aggregate="job-x")
        await published(2)
        waited = asyncio.get_running_loop().time() - written
        assert relay.published == 2
        assert 0.5 <= waited < 3.0, waited
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_relays_splitting_the_partitions_each_answer_the_notifies_of_their_own(
    db: Database, bus: NatsBus
) -> None:
    """Processes of one service split the partitions (the launchers: their shards.py): a
    row's NOTIFY wakes the relay answering for its partition alone, and with that relay
    gone the other's poll takes the row once it is a poll interval old."""
    part = partition_of("job-a", "test")
    owner = OutboxRelay(db, bus, source="test", poll_interval_s=30, answers=lambda p: p == part)
    other = OutboxRelay(db, bus, source="test", poll_interval_s=30, answers=lambda p: p != part)
    started = [_first_pass_done(relay) for relay in (owner, other)]
    tasks = [asyncio.create_task(relay.run()) for relay in (owner, other)]
    try:
        for first_pass in started:  # (they listen by then)
            await asyncio.wait_for(first_pass.wait(), 10)
        async with db.transaction() as conn:
            await append(conn, make_event("job-a"), aggregate="job-a")
        for _ in range(100):
            if owner.published:
                break
            await asyncio.sleep(0.02)
        assert (owner.published, other.published) == (1, 0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        survivor = OutboxRelay(db, bus, source="test", poll_interval_s=0.5, answers=lambda p: p != part)
        first_pass = _first_pass_done(survivor)
        tasks = [asyncio.create_task(survivor.run())]
        await asyncio.wait_for(first_pass.wait(), 10)
        written = asyncio.get_running_loop().time()
        async with db.transaction() as conn:
            await append(conn, make_event("job-a", "again"), aggregate="job-a")
        for _ in range(300):
            if survivor.published:
                break
            await asyncio.sleep(0.01)
        waited = asyncio.get_running_loop().time() - written
        assert survivor.published == 1
        assert 0.5 <= waited < 3.0, waited  # not at its NOTIFY: at the poll
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _first_pass_done(relay: OutboxRelay) -> asyncio.Event:
    """Set once the relay's first (full) pass is over: it listens by then, and from then
    on takes only rows a NOTIFY names or a poll interval old."""
    done = asyncio.Event()
    full_pass = relay.relay_pending

    async def pass_then_say(min_age_s: float = 0.0) -> int:
        try:
            return await full_pass(min_age_s)
        finally:
            done.set()

    relay.relay_pending = pass_then_say  # type: ignore[method-assign]
    return done


async def _advisory_locks(db: Database) -> int:
    return int(await db.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"))


async def test_a_pass_gives_the_partition_lock_back_whatever_it_found(db: Database, bus: NatsBus) -> None:
    """The partition's lock is a session lock on a pooled connection: every way out of a
    pass (rows sent, nothing left, NATS away) must give it back, or the partition stalls."""
    relay = OutboxRelay(db, bus)
    part = partition_of("job-a", "test")
    async with db.transaction() as conn:
        await append(conn, make_event("job-a"), aggregate="job-a")
    assert await relay._relay_partition(part) == 1
    assert await _advisory_locks(db) == 0
    assert await relay._relay_partition(part) == 0
    assert await _advisory_locks(db) == 0

    async with db.transaction() as conn:
        await append(conn, make_event("job-a", "again"), aggregate="job-a")
    await bus.nc.close()  # every publish fails: nothing is stamped, the lock still goes back
    assert await relay._relay_partition(part) == 0
    assert await _advisory_locks(db) == 0
    assert await db.fetchval("SELECT count(*) FROM corral.outbox WHERE sent_at IS NULL") == 1


class _StuckBus:
    """A bus whose publish never returns: a relay cancelled while publishing."""

    def __init__(self) -> None:
        self.publishing = asyncio.Event()

    async def publish(self, *_args: object, **_kwargs: object) -> None:
        self.publishing.set()
        await asyncio.Event().wait()


async def test_a_relay_cancelled_while_publishing_lets_its_partition_go(db: Database, bus: NatsBus) -> None:
    """Its connection is closed, not pooled with the lock: another relay takes the row."""
    part = partition_of("job-a", "test")
    async with db.transaction() as conn:
        await append(conn, make_event("job-a"), aggregate="job-a")
    stuck = _StuckBus()
    task = asyncio.create_task(OutboxRelay(db, stuck)._relay_partition(part))  # type: ignore[arg-type]
    await asyncio.wait_for(stuck.publishing.wait(), 5)
    assert await _advisory_locks(db) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(200):  # the server notices the closed connection a moment later
        if await _advisory_locks(db) == 0:
            break
        await asyncio.sleep(0.01)
    # (Checked apart: the pool may hand the next relay the very connection that held the
    # lock, and a session re-enters its own advisory lock, so the pass below cannot tell.)
    assert await _advisory_locks(db) == 0
    assert await OutboxRelay(db, bus)._relay_partition(part) == 1
    assert len(await stream_messages(bus)) == 1


async def test_a_service_relay_publishes_only_the_sources_its_service_may_publish(
    db: Database, bus: NatsBus
) -> None:
    """A service's bus identity may publish only its own events: its relay takes only the
    rows of its sources (the launcher's also the agents'), and leaves the others' rows
    to their own relays."""
    by_source = {
        source: make_event(f"job-{source.rsplit('/', 1)[-1]}").model_copy(update={"source": source})
        for source in ("corral/api", "corral/scheduler", "corral/agent", "corral/launcher")
    }
    async with db.transaction() as conn:
        for event in by_source.values():
            await append(conn, event, aggregate=event.subject)
    assert await OutboxRelay(db, bus, source="corral/api").relay_pending() == 1
    assert await OutboxRelay(db, bus, source="corral/launcher").relay_pending() == 2
    unsent = await db.fetch("SELECT subject FROM corral.outbox WHERE sent_at IS NULL")
    assert [row["subject"] for row in unsent] == [by_source["corral/scheduler"].nats_subject]
    assert await OutboxRelay(db, bus, source="corral/scheduler").relay_pending() == 1
