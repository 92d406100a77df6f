"""``/live/{view}`` over a real HTTP server, NATS and Postgres: a burst of events becomes one
``changed`` per interval, not one per event; a user is never woken by someone else's
jobs; a job's view wakes for that job only; an ended session ends the stream."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator

import httpx
import pytest

from services.api.tenants.auth import hash_token, upsert_token
from services.api.tenants.repository import TenantRepository
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from tests.api.test_events_api import _job, drained, publish, running, submitted
from tests.fixtures.api import Api

_SIGN_IN = re.compile(r'name="sign_in_token" value="([^"]+)"')


async def _signed_in(url: str, db: Database, username: str) -> httpx.AsyncClient:
    token = f"crl_{username}_live"
    await upsert_token(
        TenantRepository(db), f"tok-{username}-live", username, hash_token(token), "user", username
    )
    http = httpx.AsyncClient(base_url=url, timeout=10.0)
    form = _SIGN_IN.search((await http.get("/login")).text)
    assert form is not None
    response = await http.post("/login", data={"token": token, "sign_in_token": form.group(1)})
    assert response.status_code == 303
    return http


class Follower:
    """One live view, read in the background: the ``changed`` messages and when they came."""

    def __init__(self) -> None:
        self.changes: list[float] = []
        self.ended = asyncio.Event()
        self.lines: list[str] = []

    async def follow(self, http: httpx.AsyncClient, path: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with http.stream("GET", path) as response:
                assert response.status_code == 200, await response.aread()
                async for line in response.aiter_lines():
                    self.lines.append(line)
                    if line == "event: changed":
                        self.changes.append(loop.time())
        finally:
            self.ended.set()


@contextlib.asynccontextmanager
async def following(http: httpx.AsyncClient, path: str) -> AsyncIterator[Follower]:
    follower = Follower()
    task = asyncio.create_task(follower.follow(http, path))
    for _ in range(100):  # registered once the first bytes are out
        if follower.lines or task.done():
            break
        await asyncio.sleep(0.02)
    try:
        yield follower
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
async def alice(api: Api, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    http = await _signed_in(api.url, db, "alice")
    yield http
    await http.aclose()


async def test_a_burst_of_events_wakes_a_page_once_per_interval(
    alice: httpx.AsyncClient, db: Database, bus: NatsBus
) -> None:
    jobs = [await _job(db, "alice") for _ in range(5)]
    async with following(alice, "/live/jobs") as page:
        loop = asyncio.get_running_loop()
        start = loop.time()
        for job_id in jobs:  # ten events within a few milliseconds
            await publish(bus, submitted(job_id, "alice"), running(job_id))
        await asyncio.sleep(2.5)
        assert len(page.changes) == 1, page.lines
        # The one message came within about the interval (1 s by default), not per event.
        assert page.changes[0] - start < 1.8
        await publish(bus, running(jobs[0]))
        await asyncio.sleep(1.6)
        assert len(page.changes) == 2
        assert page.changes[1] - page.changes[0] >= 0.95  # never two within the interval


async def test_someone_elses_jobs_never_wake_a_users_page(
    alice: httpx.AsyncClient, db: Database, bus: NatsBus
) -> None:
    bobs = await _job(db, "bob")
    async with following(alice, "/live/jobs") as page:
        await publish(bus, submitted(bobs, "bob"), running(bobs))
        await asyncio.sleep(1.5)
        assert page.changes == []
        assert ": keep-alive" in page.lines  # the stream is alive, just quiet


async def test_a_job_view_wakes_for_that_job_only(
    alice: httpx.AsyncClient, db: Database, bus: NatsBus
) -> None:
    mine, other = await _job(db, "alice"), await _job(db, "alice")
    async with following(alice, f"/live/job?job={mine}") as page:
        await publish(bus, submitted(other, "alice"), running(other))
        await asyncio.sleep(1.3)
        assert page.changes == []
        await publish(bus, running(mine))
        await asyncio.sleep(1.3)
        assert len(page.changes) == 1


async def test_a_broken_view_is_refused_with_a_message(alice: httpx.AsyncClient) -> None:
    missing = await alice.get("/live/job", headers={"HX-Request": "true"})
    assert missing.status_code == 422
    assert "give ?job=" in missing.text
    unknown = await alice.get("/live/everything")
    assert unknown.status_code == 422
    assert "view" in unknown.text


async def test_signing_out_ends_the_live_stream(alice: httpx.AsyncClient, api: Api) -> None:
    # The api fixture checks sessions every 0.3 s (sse_reauth_s).
    async with following(alice, "/live/jobs") as page:
        home = await alice.get("/")
        csrf = re.search(r'name="csrf_token" value="([0-9a-f]{64})"', home.text)
        assert csrf is not None
        cookies = dict(alice.cookies)
        async with httpx.AsyncClient(base_url=api.url, cookies=cookies) as other_tab:
            assert (await other_tab.post("/logout", data={"csrf_token": csrf.group(1)})).status_code == 303
        await asyncio.wait_for(page.ended.wait(), 8.0)
        assert any(line.startswith(": closed: the session ended") for line in page.lines)


async def test_an_event_between_a_pages_render_and_its_connection_is_not_missed(
    alice: httpx.AsyncClient, db: Database, bus: NatsBus, api: Api
) -> None:
    job_id = await _job(db, "alice")
    page = await alice.get("/jobs")
    after = re.search(r'sse-connect="/live/jobs\?after=([0-9.]+)"', page.text)
    assert after is not None
    assert after.group(1) == api.hub.position.encode()
    await publish(bus, submitted(job_id, "alice"))  # after the render, before the connection
    for _ in range(100):
        if api.hub.position.encode() != after.group(1):
            break
        await asyncio.sleep(0.02)
    async with following(alice, f"/live/jobs?after={after.group(1)}") as late:
        await asyncio.sleep(0.5)
        assert len(late.changes) == 1  # at once, not at the next event
    async with following(alice, f"/live/jobs?after={api.hub.position.encode()}") as current:
        await asyncio.sleep(0.5)
        assert current.changes == []  # nothing happened since: no needless refresh


async def test_job_events_do_not_wake_the_heat_map_but_node_events_do(
    alice: httpx.AsyncClient, db: Database, bus: NatsBus
) -> None:
    job_id = await _job(db, "alice")
    async with following(alice, "/live/nodes") as page:
        await publish(bus, submitted(job_id, "alice"), running(job_id))
        await asyncio.sleep(1.3)
        assert page.changes == []
        await publish(bus, drained("n1"))
        await asyncio.sleep(1.3)
        assert len(page.changes) == 1
