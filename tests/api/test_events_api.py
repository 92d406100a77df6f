"""``GET /api/v1/events`` served by a real HTTP server over real NATS and Postgres: filters
by type, job and VC; a user sees only their own jobs' events; a client that reconnects
with ``Last-Event-ID`` gets exactly what it missed (across the three lifecycle streams);
idle streams carry keep-alives; a subscriber too slow for its queue catches up from
JetStream with no gap; bad filters and cursors are a 422 problem."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from services.api.events.hub import EventHub
from services.api.events.repository import EventRepository
from services.api.events.routes import sse
from services.api.events.scope import EventFacts, Scopes
from shared.bus.nats import NatsBus
from shared.bus.streams import JOBS
from shared.db.pool import Database
from shared.events import AlertFiring, Envelope, JobRunning, JobSubmitted, NodeDrained, TaskStarted
from shared.events.alerts import AlertFiringData
from shared.events.jobs import JobRunningData, JobSubmittedData, TaskStartedData
from shared.events.nodes import NodeDrainedData
from shared.ids import new_job_id
from tests.fixtures.api import Api


async def _job(db: Database, user: str, vc: str = "default") -> str:
    job_id = new_job_id()
    await db.execute(
        "INSERT INTO api.jobs (id, name, username, virtual_cluster, spec, total_gpus, state)"
        " VALUES ($1, 'train', $2, $3, '{}', 1, 'PENDING')",
        job_id,
        user,
        vc,
    )
    return job_id


def submitted(job_id: str, user: str, vc: str = "default") -> JobSubmitted:
    data = JobSubmittedData(job_id=job_id, name="train", user=user, virtual_cluster=vc, total_gpus=1)
    return JobSubmitted(source="corral/api", subject=job_id, data=data)


def running(job_id: str) -> JobRunning:
    return JobRunning(
        source="corral/launcher", subject=job_id, data=JobRunningData(job_id=job_id, generation=1)
    )


def started(job_id: str) -> TaskStarted:
    data = TaskStartedData(attempt_id="att-1", job_id=job_id, node_id="n0", pid=42)
    return TaskStarted(source="corral/launcher", subject="att-1", data=data)


def drained(node: str) -> NodeDrained:
    data = NodeDrainedData(node_id=node, reason="Xid 79", drained_by="monitor", evict=True)
    return NodeDrained(source="corral/monitor", subject=node, data=data)


def firing(job_id: str) -> AlertFiring:
    data = AlertFiringData(
        alert_id="alr-1", rule="JobFailed", severity="warning", summary="failed", labels={"job": job_id}
    )
    return AlertFiring(source="corral/alerter", subject="alr-1", data=data)


async def publish(bus: NatsBus, *events: Envelope) -> None:
    for event in events:
        await bus.publish(event.nats_subject, event.model_dump_json().encode(), msg_id=event.id)


class Stream:
    """An SSE connection read frame by frame."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()
        self.comments: list[str] = []

    async def next_event(self, timeout_s: float = 5.0) -> dict[str, str]:
        async with asyncio.timeout(timeout_s):
            frame: dict[str, str] = {}
            async for line in self._lines:
                if not line:
                    if "data" in frame:
                        return frame
                    continue
                if line.startswith(":"):
                    self.comments.append(line[1:].strip())
                    continue
                field, _, value = line.partition(": ")
                frame[field] = frame[field] + "\n" + value if field in frame else value
        raise AssertionError("the stream ended")

    async def silence(self, seconds: float) -> list[dict[str, str]]:
        """Whatever events arrive within ``seconds`` (none expected, usually)."""
        events = []
        with contextlib.suppress(TimeoutError):
            while True:
                events.append(await self.next_event(seconds))
        return events


@contextlib.asynccontextmanager
async def stream(api: Api, token: str, **params: object) -> AsyncIterator[Stream]:
    headers = {"Authorization": f"Bearer {token}"}
    if "last_event_id" in params:
        headers["Last-Event-ID"] = str(params.pop("last_event_id"))
    async with (
        httpx.AsyncClient(timeout=10) as http,
        http.stream("GET", api.url + "/api/v1/events", params=params, headers=headers) as response,  # type: ignore[arg-type]
    ):
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Stream(response)


async def _subscribed(api: Api, count: int) -> None:
    for _ in range(100):
        if api.hub.subscribers == count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{api.hub.subscribers} subscribers, expected {count}")


async def test_a_user_sees_only_their_jobs_events_filtered_by_vc_and_type(
    api: Api, bus: NatsBus, db: Database
) -> None:
    mine_vision, mine_default = await _job(db, "alice", "vision"), await _job(db, "alice")
    bobs = await _job(db, "bob", "vision")
    async with stream(api, api.alice, virtual_cluster="vision", type="corral.job.*") as alice:
        await _subscribed(api, 1)
        events = [
            submitted(mine_vision, "alice", "vision"),
            submitted(mine_default, "alice"),
            submitted(bobs, "bob", "vision"),
            started(mine_vision),  # a task event: not corral.job.*
            running(bobs),
            running(mine_vision),
        ]
        await publish(bus, *events)
        got = [await alice.next_event(), await alice.next_event()]
        assert [(f["event"], json.loads(f["data"])["id"]) for f in got] == [
            ("corral.job.submitted.v1", events[0].id),
            ("corral.job.running.v1", events[5].id),
        ]
        assert got[0]["data"] == events[0].model_dump_json()  # the document exactly as on NATS
        assert await alice.silence(0.5) == []
    async with stream(api, api.admin, job=bobs) as admin:
        await publish(bus, running(mine_vision), r := running(bobs))
        assert json.loads((await admin.next_event())["data"])["id"] == r.id


async def test_reconnecting_with_last_event_id_gets_every_missed_event_once_across_streams(
    api: Api, bus: NatsBus, db: Database
) -> None:
    job = await _job(db, "alice")
    before = [submitted(job, "alice"), running(job), drained("n0")]  # two streams
    async with stream(api, api.alice) as first:
        await _subscribed(api, 1)
        await publish(bus, *before)
        seen = [await first.next_event(), await first.next_event()]  # then the client drops
    await _subscribed(api, 0)  # the hub noticed the disconnect
    unread = {e.id for e in before} - {json.loads(f["data"])["id"] for f in seen}
    missed = [started(job), drained("n1"), firing(job)]  # three streams
    await publish(bus, *missed)
    async with stream(api, api.alice, last_event_id=seen[-1]["id"]) as again:
        replayed = [json.loads((await again.next_event())["data"]) for _ in range(4)]
        live = running(job)
        await publish(bus, live)
        rest = [json.loads(f["data"])["id"] for f in await again.silence(1.0)]
    ids = [e["id"] for e in replayed]
    assert sorted(ids) == sorted(unread | {e.id for e in missed}), "a gap or a duplicate"
    jobs_stream = [e["id"] for e in replayed if e["type"].startswith(("corral.job.", "corral.task."))]
    assert jobs_stream == [e.id for e in before + missed if e.id in jobs_stream]  # in stream order
    assert rest == [live.id]


async def test_an_idle_stream_carries_keep_alives(api: Api) -> None:
    async with stream(api, api.alice) as idle:
        assert await idle.silence(1.0) == []
    assert idle.comments.count("keep-alive") >= 2


def _event_ids(chunk: bytes) -> list[str]:
    """The ids of the events in one write of the stream, in order (comments skipped)."""
    messages = [m for m in chunk.split(b"\n\n") if b"\ndata: " in m]
    return [json.loads(m.split(b"\ndata: ", 1)[1])["id"] for m in messages]


async def test_a_subscriber_too_slow_for_its_queue_catches_up_from_jetstream(
    api: Api, bus: NatsBus, db: Database
) -> None:
    job = await _job(db, "alice")

    def everything(_: EventFacts) -> bool:
        return True

    frames = sse(api.hub, everything, None, 5.0)
    assert (await anext(frames)).startswith(b"retry:")

    async def next_frame() -> bytes:
        return await anext(frames)

    first = asyncio.create_task(next_frame())  # registers, then waits for the first event
    await _subscribed(api, 1)
    burst = [running(job) for _ in range(60)]  # the queue holds 10
    await publish(bus, *burst)
    ids = _event_ids(await first)  # one write may carry several events that queued up
    await asyncio.sleep(0.5)  # a slow client: the rest overflow its queue
    while len(ids) < len(burst):
        ids += _event_ids(await asyncio.wait_for(anext(frames), 5.0))
    await frames.aclose()
    assert ids == [e.id for e in burst]
    assert api.hub.overflows >= 1
    assert api.hub.subscribers == 0


@pytest.mark.parametrize(
    ("params", "headers", "detail"),
    [
        ({"type": "corral.job.exploded.v1"}, {}, "unknown event type 'corral.job.exploded.v1'"),
        ({"type": "corral.alert.rules_requested.v1"}, {}, "only an admin may receive"),
        ({"job": "../etc/passwd"}, {}, "job"),
        ({}, {"Last-Event-ID": "12;DROP"}, "is not an id this stream sent"),
    ],
)
async def test_bad_filters_and_cursors_are_a_clear_422(
    api: Api, params: dict[str, str], headers: dict[str, str], detail: str
) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.get(
            api.url + "/api/v1/events",
            params=params,
            headers={"Authorization": f"Bearer {api.alice}", **headers},
        )
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert detail in response.json()["detail"]
    assert api.hub.subscribers == 0


async def test_the_event_stream_needs_a_token(api: Api) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.get(api.url + "/api/v1/events")
    assert response.status_code == 401


async def test_a_stream_ends_once_its_token_is_revoked_and_cannot_resume(
    api: Api, bus: NatsBus, db: Database
) -> None:
    """Within a re-check (0.3 s here; 30 s by default) and a keep-alive of the revoke; a
    token that still holds keeps its stream."""
    async with stream(api, api.alice) as revoked, stream(api, api.admin) as kept:
        await _subscribed(api, 2)
        async with httpx.AsyncClient() as http:
            response = await http.delete(
                api.url + "/api/v1/tokens/tok-alice", headers={"Authorization": f"Bearer {api.admin}"}
            )
        assert response.status_code == 204, response.text
        with pytest.raises(AssertionError, match="the stream ended"):
            await revoked.next_event(3.0)
        assert any(comment.startswith("closed: the token") for comment in revoked.comments)
        job = await _job(db, "alice")
        await publish(bus, submitted(job, "alice"))
        assert (await kept.next_event())["event"] == "corral.job.submitted.v1"
    async with httpx.AsyncClient() as http:
        again = await http.get(api.url + "/api/v1/events", headers={"Authorization": f"Bearer {api.alice}"})
    assert again.status_code == 401


async def test_with_no_stream_open_the_hub_only_moves_its_position(
    api: Api, bus: NatsBus, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No facts worked out for nobody (a JSON parse and an owner look-up per event);
    a stream opened afterwards starts exactly after what was skipped."""
    worked_out = 0
    facts = api.hub.scopes.facts

    async def counting(payload: bytes) -> EventFacts | None:
        nonlocal worked_out
        worked_out += 1
        return await facts(payload)

    monkeypatch.setattr(api.hub.scopes, "facts", counting)
    job = await _job(db, "alice")
    await publish(bus, submitted(job, "alice"), running(job))
    for _ in range(100):
        probe = api.hub.register(lambda _: False)  # (a registration reads the position)
        api.hub.unregister(probe)
        if probe.start.positions[0] >= 2:
            break
        await asyncio.sleep(0.02)
    assert probe.start.positions[0] >= 2
    assert worked_out == 0
    async with stream(api, api.alice) as alice:
        await _subscribed(api, 1)
        await publish(bus, started(job))
        assert (await alice.next_event())["event"] == "corral.task.started.v1"
        assert await alice.silence(0.3) == []  # and nothing from before it opened
    assert worked_out == 1


@pytest.mark.slow
async def test_the_hub_tails_the_streams_only_while_someone_follows(bus: NatsBus, db: Database) -> None:
    """No ordered consumers (no NATS push of every event, no CPU in the API) until a
    stream asks for them, and none again once nobody has followed for ``idle_s``; a
    subscriber after a pause starts at the streams' ends, not at the pause."""
    hub = EventHub(bus.js, Scopes(EventRepository(db)), idle_s=0.3)
    running_hub = asyncio.create_task(hub.run())

    async def consumers() -> int:
        return int((await bus.js.stream_info(JOBS.name)).state.consumer_count)

    try:
        before = await consumers()
        await asyncio.sleep(0.1)
        assert not hub.tailing
        assert await consumers() == before
        job = await _job(db, "alice")

        assert await hub.wait_ready(5.0)
        assert await consumers() == before + 1
        first = hub.register(lambda facts: facts.job_id == job)
        await publish(bus, submitted(job, "alice"))
        assert [e.facts.type for e in await first.next_batch(5.0)] == ["corral.job.submitted.v1"]
        hub.unregister(first)

        for _ in range(200):  # idle for 0.3 s: the tails stop; the server drops them 2 s on
            if not hub.tailing and await consumers() == before:
                break
            await asyncio.sleep(0.05)
        assert not hub.tailing
        assert await consumers() == before

        await publish(bus, running(job))  # while nobody follows
        assert await hub.wait_ready(5.0)
        second = hub.register(lambda facts: facts.job_id == job)
        await publish(bus, started(job))
        assert [e.facts.type for e in await second.next_batch(5.0)] == ["corral.task.started.v1"]
        assert second.start.positions[0] == first.start.positions[0] + 2  # the two before it
    finally:
        running_hub.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running_hub
