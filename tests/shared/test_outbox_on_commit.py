"""Publishing on commit (what a service's own transactions append, published by its own
relay) and a change with its events in one statement, against real Postgres and NATS."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.events import JobSubmitted
from shared.outbox import (
    STAMP_AFTER_S,
    Consequence,
    OutboxRelay,
    append,
    append_many,
    append_with_change,
    change_with_event,
    following_others,
    notify_channel,
    outbox_row,
)
from shared.outbox.rows import INSERT
from shared.settings import NatsSettings
from tests.shared.outbox_helpers import (
    Abort,
    append_then_fail,
    make_event,
    running_on_commit,
    stream_messages,
    until,
)


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
        async with running_on_commit(relay):
            async with db.transaction() as conn:
                await append(conn, make_event("job-a", "first"), aggregate="job-a")
                await append(conn, make_event("job-a", "second"), aggregate="job-a")
                await asyncio.sleep(0.2)
                assert relay.published == 0  # not before the commit
            async with db.transaction() as conn:
                await append_many(
                    conn, [(make_event("job-a", "third"), "job-a"), (make_event("job-b"), "job-b")]
                )
            await until(lambda: relay.published == 4)
            assert relay.published == 4
            await asyncio.sleep(STAMP_AFTER_S + 0.2)
        await listener.remove_listener(notify_channel("test"), heard)
    names = [
        (subject, JobSubmitted.model_validate_json(data).data.name)
        for subject, data, _ in await stream_messages(bus)
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
    async with running_on_commit(relay):
        with pytest.raises(Abort):
            await append_then_fail(db, "job-a")
        await asyncio.sleep(0.3)
    assert relay.published == 0
    assert await stream_messages(bus) == []


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
        async with running_on_commit(failing):
            async with db.transaction() as conn:
                await append(conn, make_event("job-a", "first"), aggregate="job-a")
            await until(lambda: not failing.publishing_on_commit)
            assert not failing.publishing_on_commit
            async with db.transaction() as conn:
                await append(conn, make_event("job-a", "second"), aggregate="job-a")
            await until(lambda: elsewhere.published == 2)
    finally:
        other.cancel()
        await asyncio.gather(other, return_exceptions=True)
    assert failing.published == 0
    assert elsewhere.published == 2
    names = [JobSubmitted.model_validate_json(data).data.name for _, data, _ in await stream_messages(bus)]
    assert names == ["first", "second"]


# --- a change and its event as one statement -----------------------------------------


async def test_a_change_and_its_event_are_one_statement_and_no_change_writes_no_event(
    db: Database, bus: NatsBus
) -> None:
    await db.execute("CREATE TABLE things (id text PRIMARY KEY, state text NOT NULL)")
    await db.execute("INSERT INTO things VALUES ('a', 'NEW')")
    start = "UPDATE things SET state = 'STARTED' WHERE id = $1 AND state = $2 RETURNING id, state;"
    changed = await change_with_event(db, start, ("a", "NEW"), make_event("job-a"), aggregate="job-a")
    assert changed is not None
    assert dict(changed) == {"id": "a", "state": "STARTED"}
    # The same change again finds nothing to change: no row, and no event.
    assert (
        await change_with_event(db, start, ("a", "NEW"), make_event("job-a", "again"), aggregate="job-a")
        is None
    )
    assert await db.fetchval("SELECT count(*) FROM corral.outbox") == 1
    # With no relay publishing on commit, it NOTIFYs the relays: a pass publishes it.
    assert await OutboxRelay(db, bus).relay_pending() == 1

    relay = OutboxRelay(db, bus, source="test", poll_interval_s=30)
    async with running_on_commit(relay):
        finish = "UPDATE things SET state = 'DONE' WHERE id = $1 RETURNING id"
        assert await change_with_event(db, finish, ("a",), make_event("job-a", "done"), aggregate="job-a")
        await until(lambda: relay.published == 1)
    assert relay.published == 1  # on commit: its own relay, no pass (its poll is 30 s away)
    names = [JobSubmitted.model_validate_json(data).data.name for _, data, _ in await stream_messages(bus)]
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
        make_event("job-w", "whole started"),
    )
    relay = OutboxRelay(db, bus, source="test", poll_interval_s=30)
    async with running_on_commit(relay):
        first = await change_with_event(
            db, start, ("p1",), make_event("job-w", "p1 started"), aggregate="job-w", then=whole_started
        )
        assert first is not None
        assert (first["whole"], first["whole_state"], first["consequence_rows"]) == ("w", "STARTED", 1)
        # The second part changes, the whole does not again: its event only.
        second = await change_with_event(
            db, start, ("p2",), make_event("job-w", "p2 started"), aggregate="job-w", then=whole_started
        )
        assert second is not None
        assert (second["whole_state"], second["consequence_rows"]) == (None, 0)
        # No change at all: no consequence either, and no event.
        again = await change_with_event(
            db, start, ("p2",), make_event("job-w", "p2 again"), aggregate="job-w", then=whole_started
        )
        assert again is None
        await until(lambda: relay.published == 3)
    assert relay.published == 3  # on commit, each of them
    names = [JobSubmitted.model_validate_json(data).data.name for _, data, _ in await stream_messages(bus)]
    assert names == ["p1 started", "whole started", "p2 started"]


async def test_a_change_and_its_event_in_the_callers_transaction_commit_or_vanish_together(
    db: Database, bus: NatsBus
) -> None:
    await db.execute("CREATE TABLE things (id text PRIMARY KEY, state text NOT NULL)")
    await db.execute("INSERT INTO things VALUES ('a', 'NEW'), ('b', 'NEW')")
    start = "UPDATE things SET state = 'STARTED' WHERE id = $1 AND state = 'NEW' RETURNING id, state"
    with pytest.raises(RuntimeError, match="inside a transaction"):
        async with db.connection() as conn:
            await append_with_change(conn, start, ("a",), make_event("job-a"), aggregate="job-a")
    relay = OutboxRelay(db, bus, source="test", poll_interval_s=30)
    async with running_on_commit(relay):

        async def write_then_fail() -> None:
            async with db.transaction() as conn:
                await append_with_change(conn, start, ("a",), make_event("job-a", "lost"), aggregate="job-a")
                raise Abort

        with pytest.raises(Abort):
            await write_then_fail()
        async with db.transaction() as conn:
            changed = await append_with_change(
                conn, start, ("a",), make_event("job-a", "a"), aggregate="job-a"
            )
            assert changed is not None
            assert dict(changed) == {"id": "a", "state": "STARTED"}
            # Nothing left to change: no row, and no event.
            again = await append_with_change(
                conn, start, ("a",), make_event("job-a", "again"), aggregate="job-a"
            )
            assert again is None
            await append_with_change(conn, start, ("b",), make_event("job-a", "b"), aggregate="job-a")
            assert relay.published == 0  # not before the commit
        await until(lambda: relay.published == 2)
    assert relay.published == 2  # on commit, by its own relay: its poll is 30 s away
    assert await db.fetchval("SELECT count(*) FROM corral.outbox") == 2
    assert await db.fetchval("SELECT count(*) FROM things WHERE state = 'STARTED'") == 2
    names = [JobSubmitted.model_validate_json(data).data.name for _, data, _ in await stream_messages(bus)]
    assert names == ["a", "b"]


async def test_an_event_following_another_process_goes_out_after_that_processs_unsent_row(
    db: Database, bus: NatsBus
) -> None:
    """A node agent records a task's end (its row waits for the launcher's relay pass);
    the launcher decides the job at once. Decided ``following_others``, the job's event
    goes through a relay pass, which publishes the agent's older row of the same
    partition first. Published on commit instead, it would go alone, first (the agent's
    row here has no NOTIFY, so only the 30 s poll would send it)."""
    assert await _decided_after_an_unsent_agent_row(db, bus, following=True) == ["task ended", "job decided"]


async def test_without_following_others_the_deciders_event_would_overtake(db: Database, bus: NatsBus) -> None:
    """The other side of the test above: on commit, the launcher's own event leaves alone."""
    assert await _decided_after_an_unsent_agent_row(db, bus, following=False) == ["job decided"]


async def _decided_after_an_unsent_agent_row(db: Database, bus: NatsBus, *, following: bool) -> list[str]:
    """What reaches the stream when the launcher decides a job after an agent's row that
    no relay has taken yet (the names of the events, in stream order)."""
    relay = OutboxRelay(db, bus, source="corral/launcher", poll_interval_s=30)
    async with running_on_commit(relay):
        agents = make_event("job-a", "task ended", source="corral/agent")
        await db.execute(INSERT, *outbox_row(agents, "job-a"))  # (no NOTIFY: the relay waits)
        await asyncio.sleep(0.3)
        assert relay.published == 0
        with following_others() if following else contextlib.nullcontext():
            async with db.transaction() as conn:
                decided = make_event("job-a", "job decided", source="corral/launcher")
                await append(conn, decided, aggregate="job-a")
        await until(lambda: relay.published == (2 if following else 1))
        await asyncio.sleep(0.3)
        assert relay.published == (2 if following else 1)
    return [JobSubmitted.model_validate_json(data).data.name for _, data, _ in await stream_messages(bus)]
