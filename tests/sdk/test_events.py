"""The SDK's event stream: typed events from the real ``GET /api/v1/events``; after the
connection drops (a real TCP proxy between client and API is cut), the iterator
reconnects with ``Last-Event-ID`` and nothing is missed or repeated."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from corral.local.ports import free_port
from corral.sdk import AsyncClient, Client
from corral.sdk.models import Event
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from tests.api.test_events_api import _job, _subscribed, drained, publish, running, started, submitted
from tests.fixtures.api import Api


class CuttableProxy:
    """A TCP proxy to the API whose open connections can be cut, as a network blip would."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> CuttableProxy:
        self._server = await asyncio.start_server(self._connect, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        await self._server.wait_closed()

    def cut(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers |= {writer, up_writer}
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(source, sink))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        sink.transport.abort()


async def _collect(events: AsyncIterator[Event], into: list[Event]) -> None:
    async for event in events:
        into.append(event)


async def _until(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    for _ in range(int(timeout_s / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no {what} within {timeout_s}s")


async def test_the_stream_resumes_after_a_cut_connection_with_no_gap_and_no_duplicate(
    api: Api, bus: NatsBus, db: Database
) -> None:
    job = await _job(db, "alice")
    port = int(api.url.rsplit(":", 1)[1])
    got: list[Event] = []
    async with (
        CuttableProxy(port) as proxy,
        AsyncClient(f"http://127.0.0.1:{proxy.port}", api.alice) as corral,
    ):
        reading = asyncio.create_task(_collect(corral.events(reconnect_delay_s=0.05), got))
        await _subscribed(api, 1)
        before = [submitted(job, "alice"), running(job)]
        await publish(bus, *before)
        await _until(lambda: len(got) == 2, "the first events")
        proxy.cut()
        await _subscribed(api, 0)  # the API saw the connection go
        missed = [started(job), drained("n1")]  # published while no one listens
        await publish(bus, *missed)
        await _until(lambda: len(got) == 4, "the missed events, after the reconnect")
        live = running(job)
        await publish(bus, live)
        await _until(lambda: len(got) == 5, "a live event")
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
    ids = [event.document["id"] for event in got]
    assert ids == [e.id for e in [*before, *missed, live]]  # in order, none missed, none twice
    assert got[0].type == "corral.job.submitted.v1"
    assert got[0].data["job_id"] == job
    assert got[0].subject == job


async def test_the_sync_stream_filters_and_resumes_from_a_given_cursor(
    api: Api, bus: NatsBus, db: Database
) -> None:
    job = await _job(db, "alice")

    def read(count: int, last_event_id: str | None = None) -> list[Event]:
        with Client(api.url, api.alice) as corral:
            stream = corral.events(types=["corral.job.*"], jobs=[job], last_event_id=last_event_id)
            return [next(stream) for _ in range(count)]

    first = asyncio.create_task(asyncio.to_thread(read, 1))
    await _subscribed(api, 1)
    events = [submitted(job, "alice"), started(job), running(job)]
    await publish(bus, *events)
    [seen] = await first
    assert seen.document["id"] == events[0].id
    [after] = await asyncio.to_thread(read, 1, seen.id)  # from the cursor: the task event is filtered
    assert after.document["id"] == events[2].id
