"""The transactional outbox and its relay, against real Postgres and real NATS."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Callable

import pytest
from opentelemetry import trace
from prometheus_client import REGISTRY

from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.events import JobSubmitted
from shared.events.jobs import JobSubmittedData
from shared.outbox import (
    STAMP_AFTER_S,
    Consequence,
    OutboxRelay,
    append,
    append_many,
    change_with_event,
    notify_channel,
    partition_of,
    publishing_on_commit,
)
from shared.outbox.relay import _RELAY_LOCK_CLASS
from shared.settings import NatsSettings
from tests.tracing import global_tracer_provider


def _event(job: str, name: str = "step") -> JobSubmitted:
    return JobSubmitted(
        source="test",
        subject=job,
        data=JobSubmittedData(job_id=job, name=name, user="ada", virtual_cluster="default", total_gpus=1),
    )


async def _stream_messages(
    bus: NatsBus, subject: str = "corral.job.>"
) -> list[tuple[str, bytes, dict[str, str]]]:
    """Everything on the JOBS stream, read with an ephemeral ordered consumer."""
    sub = await bus.js.subscribe(subject, ordered_consumer=True)
    messages: list[tuple[str, bytes, dict[str, str]]] = []
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=0.5)
            except TimeoutError:
                return messages
            messages.append((msg.subject, msg.data, dict(msg.headers or {})))
    finally:
        await sub.unsubscribe()


async def test_append_needs_the_callers_transaction(db: Database) -> None:
    async with db.connection() as conn:
        with pytest.raises(RuntimeError, match="inside the transaction"):
            await append(conn, _event("job-1"), aggregate="job-1")


class Abort(Exception):
    pass


async def _append_then_fail(db: Database, job: str) -> None:
    """A state change that appends its event, then fails: its transaction rolls back."""
    async with db.transaction() as conn:
        await append(conn, _event(job), aggregate=job)
        raise Abort


async def test_a_rolled_back_change_leaves_no_event(db: Database) -> None:
    with pytest.raises(Abort):
        await _append_then_fail(db, "job-1")
    assert await db.fetchrow("SELECT 1 FROM corral.outbox") is None


async def test_relay_publishes_with_msg_id_and_traceparent_then_marks_sent(
    db: Database, bus: NatsBus
) -> None:
    published_before = _sample("corral_events_published_total", type="job.submitted")
    lags_before = _sample("corral_outbox_lag_seconds_count")
    with global_tracer_provider() as spans:
        with trace.get_tracer("test").start_as_current_span("submit") as span:
            async with db.transaction() as conn:
                event = _event("job-1")
                await append(conn, event, aggregate="job-1")
            trace_id = format(span.get_span_context().trace_id, "032x")
        relay = OutboxRelay(db, bus)
        assert await relay.relay_pending() == 1
    [(subject, data, headers)] = await _stream_messages(bus)
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
                await append(conn, _event(job, f"step-{step}"), aggregate=job)
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
    for _, data, _ in await _stream_messages(bus):
        event = JobSubmitted.model_validate_json(data)
        seen[event.data.job_id].append(event.data.name)
    assert seen == expected
    assert sum(r.published for r in relays) == 6 * 25
    assert sum(1 for r in relays if r.published) >= 2, "the relays should have shared the work"


async def test_rows_wait_while_nats_is_down_and_go_out_when_it_is_back(db: Database, nats_url: str) -> None:
    bus = await NatsBus.connect(NatsSettings(url=nats_url))
    await bus.ensure_streams()
    async with db.transaction() as conn:
        await append(conn, _event("job-1"), aggregate="job-1")
    await bus.nc.close()  # the relay's connection is gone
    relay = OutboxRelay(db, bus)
    assert await relay.relay_pending() == 0
    row = await db.fetchrow("SELECT sent_at FROM corral.outbox")
    assert row is not None
    assert row["sent_at"] is None

    again = await NatsBus.connect(NatsSettings(url=nats_url))
    try:
        assert await OutboxRelay(db, again).relay_pending() == 1
        assert len(await _stream_messages(again)) == 1
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
            await append(conn, _event("job-a"), aggregate="job-a")
            await append(conn, _event("job-b"), aggregate="job-b")  # most likely another partition
        for _ in range(100):
            if relay.published == 2:
                break
            await asyncio.sleep(0.02)
        assert relay.published == 2
        assert sorted(subject for subject, _, _ in await _stream_messages(bus)) == [
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
    part = partition_of("job-a")
    async with db.transaction() as conn:
        await append(conn, _event("job-a"), aggregate="job-a")
    assert await relay._relay_partition(part) == 1
    assert await relay._relay_partition(part) == 0  # nothing left: not contention
    async with db.transaction() as conn:
        await append(conn, _event("job-a", "again"), aggregate="job-a")
    async with db.transaction() as other_relay:
        await other_relay.execute("SELECT pg_advisory_xact_lock($1, $2)", _RELAY_LOCK_CLASS, part)
        assert await relay._relay_partition(part) is None  # held: the row waits for its holder
    assert await relay._relay_partition(part) == 1
    assert relay.published == 2


async def test_the_poll_takes_a_row_whose_notify_never_came_once_it_is_a_poll_interval_old(
    db: Database, bus: NatsBus
) -> None:
    """Not sooner: younger rows are in flight with the relay their NOTIFY woke, and every
    relay taking them on every poll had them all contending for the same partitions."""
    async with db.transaction() as conn:  # before any relay listens: its first pass takes it
        await append(conn, _event("job-early"), aggregate="job-early")
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
        unheard = _event("job-x").model_copy(update={"source": "corral/elsewhere"})  # another channel
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


async def _advisory_locks(db: Database) -> int:
    return int(await db.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"))


async def test_a_pass_gives_the_partition_lock_back_whatever_it_found(db: Database, bus: NatsBus) -> None:
    """The partition's lock is a session lock on a pooled connection: every way out of a
    pass (rows sent, nothing left, NATS away) must give it back, or the partition stalls."""
    relay = OutboxRelay(db, bus)
    part = partition_of("job-a")
    async with db.transaction() as conn:
        await append(conn, _event("job-a"), aggregate="job-a")
    assert await relay._relay_partition(part) == 1
    assert await _advisory_locks(db) == 0
    assert await relay._relay_partition(part) == 0
    assert await _advisory_locks(db) == 0

    async with db.transaction() as conn:
        await append(conn, _event("job-a", "again"), aggregate="job-a")
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
    part = partition_of("job-a")
    async with db.transaction() as conn:
        await append(conn, _event("job-a"), aggregate="job-a")
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
    assert len(await _stream_messages(bus)) == 1


# --- publishing on commit: what a service's own transactions append --------------------


async def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def _running(relay: OutboxRelay) -> AsyncIterator[None]:
    """``relay`` running and publishing on commit for this test's transactions, once its
    first (full) pass is over and it listens."""
    with publishing_on_commit(relay):
        task = asyncio.create_task(relay.run())
        try:
            await _until(lambda: relay.publishing_on_commit)
            await asyncio.sleep(0.3)
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_a_process_publishes_what_it_commits_at_once_in_order_without_a_notify(
    db: Database, bus: NatsBus
) -> None:
    """No NOTIFY, no relay pass: the transaction's own relay publishes its rows once it
    has committed, then stamps them (a poll 30 s away cannot be what sent them)."""
    relay = OutboxRelay(db, bus, source="test", poll_interval_s=30)
    notifications: list[object] = []

    def heard(*args: object) -> None:
        notifications.append(args)

    async with db.connection() as listener:
        await listener.add_listener(notify_channel("test"), heard)
        async with _running(relay):
            async with db.transaction() as conn:
                await append(conn, _event("job-a", "first"), aggregate="job-a")
                await append(conn, _event("job-a", "second"), aggregate="job-a")
                await asyncio.sleep(0.2)
                assert relay.published == 0  # not before the commit
            async with db.transaction() as conn:
                await append_many(conn, [(_event("job-a", "third"), "job-a"), (_event("job-b"), "job-b")])
            await _until(lambda: relay.published == 4)
            assert relay.published == 4
            await asyncio.sleep(STAMP_AFTER_S + 0.2)
        await listener.remove_listener(notify_channel("test"), heard)
    names = [
        (subject, JobSubmitted.model_validate_json(data).data.name)
        for subject, data, _ in await _stream_messages(bus)
    ]
    assert names == [
        ("corral.job.submitted.job-a", "first"),
        ("corral.job.submitted.job-a", "second"),
        ("corral.job.submitted.job-a", "third"),
        ("corral.job.submitted.job-b", "step"),
    ]
    assert notifications == []
    assert await db.fetchval("SELECT count(*) FROM corral.outbox WHERE sent_at IS NULL") == 0


async def test_a_rolled_back_transaction_publishes_nothing(db: Database, bus: NatsBus) -> None:
    relay = OutboxRelay(db, bus, source="test", poll_interval_s=30)
    async with _running(relay):
        with pytest.raises(Abort):
            await _append_then_fail(db, "job-a")
        await asyncio.sleep(0.3)
    assert relay.published == 0
    assert await _stream_messages(bus) == []


async def test_rows_whose_publish_on_commit_failed_go_out_through_the_relays_in_order(
    db: Database, bus: NatsBus, nats_url: str
) -> None:
    """The process's NATS connection is gone: its publish fails, it stops publishing on
    commit for a while (the next row NOTIFYs), and a relay elsewhere publishes both rows,
    in order, the first once it is a poll interval old."""
    broken = await NatsBus.connect(NatsSettings(url=nats_url))
    await broken.nc.close()
    failing = OutboxRelay(db, broken, source="test", poll_interval_s=5)
    elsewhere = OutboxRelay(db, bus, source="test", poll_interval_s=0.5)
    other = asyncio.create_task(elsewhere.run())  # not publishing on commit: only relays
    try:
        async with _running(failing):
            async with db.transaction() as conn:
                await append(conn, _event("job-a", "first"), aggregate="job-a")
            await _until(lambda: not failing.publishing_on_commit)
            assert not failing.publishing_on_commit
            async with db.transaction() as conn:
                await append(conn, _event("job-a", "second"), aggregate="job-a")
            await _until(lambda: elsewhere.published == 2)
    finally:
        other.cancel()
        await asyncio.gather(other, return_exceptions=True)
    assert failing.published == 0
    assert elsewhere.published == 2
    names = [JobSubmitted.model_validate_json(data).data.name for _, data, _ in await _stream_messages(bus)]
    assert names == ["first", "second"]


# --- a change and its event as one statement -----------------------------------------


async def test_a_change_and_its_event_are_one_statement_and_no_change_writes_no_event(
    db: Database, bus: NatsBus
) -> None:
    await db.execute("CREATE TABLE things (id text PRIMARY KEY, state text NOT NULL)")
    await db.execute("INSERT INTO things VALUES ('a', 'NEW')")
    start = "UPDATE things SET state = 'STARTED' WHERE id = $1 AND state = $2 RETURNING id, state;"
    changed = await change_with_event(db, start, ("a", "NEW"), _event("job-a"), aggregate="job-a")
    assert changed is not None
    assert dict(changed) == {"id": "a", "state": "STARTED"}
    # The same change again finds nothing to change: no row, and no event.
    assert (
        await change_with_event(db, start, ("a", "NEW"), _event("job-a", "again"), aggregate="job-a") is None
    )
    assert await db.fetchval("SELECT count(*) FROM corral.outbox") == 1
    # With no relay publishing on commit, it NOTIFYs the relays: a pass publishes it.
    assert await OutboxRelay(db, bus).relay_pending() == 1

    relay = OutboxRelay(db, bus, source="test", poll_interval_s=30)
    async with _running(relay):
        finish = "UPDATE things SET state = 'DONE' WHERE id = $1 RETURNING id"
        assert await change_with_event(db, finish, ("a",), _event("job-a", "done"), aggregate="job-a")
        await _until(lambda: relay.published == 1)
    assert relay.published == 1  # on commit: its own relay, no pass (its poll is 30 s away)
    names = [JobSubmitted.model_validate_json(data).data.name for _, data, _ in await _stream_messages(bus)]
    assert names == ["step", "done"]


async def test_a_consequence_and_its_event_follow_the_change_only_when_it_changed_something(
    db: Database, bus: NatsBus
) -> None:
    await db.execute("CREATE TABLE parts (id text PRIMARY KEY, whole text NOT NULL, state text NOT NULL)")
    await db.execute("CREATE TABLE wholes (id text PRIMARY KEY, state text NOT NULL)")
    await db.execute("INSERT INTO wholes VALUES ('w', 'WAITING')")
    await db.execute("INSERT INTO parts VALUES ('p1', 'w', 'NEW'), ('p2', 'w', 'NEW')")
    start = "UPDATE parts SET state = 'STARTED' WHERE id = $1 AND state = 'NEW' RETURNING whole"
    whole_started = Consequence(
        "UPDATE wholes w SET state = 'STARTED' FROM changed c WHERE w.id = c.whole AND w.state = 'WAITING'"
        " RETURNING w.state AS whole_state",
        _event("job-w", "whole started"),
    )
    relay = OutboxRelay(db, bus, source="test", poll_interval_s=30)
    async with _running(relay):
        first = await change_with_event(
            db, start, ("p1",), _event("job-w", "p1 started"), aggregate="job-w", then=whole_started
        )
        assert first is not None
        assert (first["whole"], first["whole_state"], first["consequence_rows"]) == ("w", "STARTED", 1)
        # The second part changes, the whole does not again: its event only.
        second = await change_with_event(
            db, start, ("p2",), _event("job-w", "p2 started"), aggregate="job-w", then=whole_started
        )
        assert second is not None
        assert (second["whole_state"], second["consequence_rows"]) == (None, 0)
        # No change at all: no consequence either, and no event.
        again = await change_with_event(
            db, start, ("p2",), _event("job-w", "p2 again"), aggregate="job-w", then=whole_started
        )
        assert again is None
        await _until(lambda: relay.published == 3)
    assert relay.published == 3  # on commit, each of them
    names = [JobSubmitted.model_validate_json(data).data.name for _, data, _ in await _stream_messages(bus)]
    assert names == ["p1 started", "whole started", "p2 started"]
