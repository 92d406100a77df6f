"""Webhooks over real NATS, Postgres and HTTP receivers: deliveries signed so that the
public ``standardwebhooks`` package verifies them (also during a secret rotation, with
both signatures), retried with growing delays after a 500, an endpoint answering 410
disabled, redelivery by hand, one delivery per event however often it is delivered, the
delivery log with response codes; bad input refused with a problem that names it and
nothing stored; a user sees and receives only what is theirs; ``corral webhook``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from corral import cli
from services.api.events.hub import EventHub
from services.api.events.repository import EventRepository
from services.api.events.scope import Scopes
from services.api.integrations import run_integrations
from services.api.settings import ApiSettings
from services.api.tenants.auth import hash_token, upsert_token
from services.api.tenants.repository import TenantRepository
from services.api.webhooks import fan_in as webhook_fanin
from services.api.webhooks.fan_in import WebhookFanIn
from services.api.webhooks.repository import WebhookRepository
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.deadletters import PostgresDeadLetters
from shared.events import JobFailed, JobSucceeded
from shared.events.jobs import JobEndedData
from tests.api.test_events_api import _job, publish, running, submitted
from tests.fixtures.api import Api
from tests.fixtures.receivers import Receivers

SETTINGS = ApiSettings(webhook_retry_delays_s=(0.4, 1.2), webhook_timeout_s=2.0)


@pytest.fixture
async def delivering(db: Database, bus: NatsBus, client: httpx.AsyncClient) -> AsyncIterator[None]:
    """The API's integrator loops (hub, fan-in consumers, delivery) on the test's app."""
    hub = EventHub(bus.js, Scopes(EventRepository(db)))
    state = client._transport.app.state  # type: ignore[attr-defined]
    loops = run_integrations(
        db, bus, PostgresDeadLetters(db), SETTINGS, hub, state.webhook_wake, state.webhooks_added
    )
    task = asyncio.create_task(loops)
    # The fan-in consumers start at "new": wait until they exist before publishing.
    for _ in range(200):
        names = [c.name async for c in _consumers(bus, "CORRAL_JOBS")]
        if "api-webhooks-jobs" in names:
            break
        await asyncio.sleep(0.05)
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _consumers(bus: NatsBus, stream: str) -> AsyncIterator[Any]:
    for info in await bus.js.consumers_info(stream):
        yield info


async def _eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def failed(job_id: str) -> JobFailed:
    data = JobEndedData(job_id=job_id, generation=1, exit_code=3, reason="exit 3")
    return JobFailed(source="corral/launcher", subject=job_id, data=data)


def succeeded(job_id: str) -> JobSucceeded:
    data = JobEndedData(job_id=job_id, generation=1, exit_code=0)
    return JobSucceeded(source="corral/launcher", subject=job_id, data=data)


async def _create(client: httpx.AsyncClient, url: str, *types: str, **extra: object) -> dict[str, Any]:
    response = await client.post("/api/v1/webhooks", json={"url": url, "event_types": list(types), **extra})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def _deliveries(client: httpx.AsyncClient, webhook_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"/api/v1/webhooks/{webhook_id}/deliveries")
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


@pytest.mark.usefixtures("delivering")
async def test_deliveries_are_signed_so_standardwebhooks_verifies_them_also_during_rotation(
    client: httpx.AsyncClient, bus: NatsBus, db: Database, receivers: Receivers
) -> None:
    hook = await _create(client, receivers.url("hooks"), "corral.job.failed.v1")
    assert hook["secret"].startswith("whsec_")
    job = await _job(db, "admin")
    event = failed(job)
    await publish(bus, submitted(job, "admin"), event)  # only job.failed is subscribed

    async def arrived(count: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return len(receivers.raw) >= count

        return check

    await _eventually(await arrived(1))
    _, headers, body = receivers.raw[0]
    assert body == event.model_dump_json().encode()  # the CloudEvents document as on NATS
    assert headers["webhook-id"] == event.id
    assert Webhook(hook["secret"]).verify(body, headers)["id"] == event.id
    assert headers["webhook-signature"].startswith("v1,")

    rotated = (await client.post(f"/api/v1/webhooks/{hook['id']}/rotate-secret", json={})).json()
    assert rotated["secret"] != hook["secret"]
    assert (await client.get(f"/api/v1/webhooks/{hook['id']}")).json()["signing_secrets"] == 2
    await publish(bus, second := failed(job))
    await _eventually(await arrived(2))
    _, headers, body = receivers.raw[1]
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (hook["secret"], rotated["secret"]):  # old and new both verify
        assert Webhook(secret).verify(body, headers)["id"] == second.id
    with pytest.raises(Exception, match="No matching signature"):
        Webhook("whsec_" + "A" * 43 + "=").verify(body, headers)
    assert len(receivers.raw) == 2  # nothing for job.submitted


@pytest.mark.slow
@pytest.mark.usefixtures("delivering")
async def test_a_500_is_retried_with_growing_delays_then_delivered_and_logged(
    client: httpx.AsyncClient, bus: NatsBus, db: Database, receivers: Receivers
) -> None:
    hook = await _create(client, receivers.url("broken"), "corral.job.*")  # 500 twice, then 200
    job = await _job(db, "admin")
    await publish(bus, event := failed(job))

    async def delivered() -> bool:
        items = await _deliveries(client, hook["id"])
        return bool(items) and items[0]["state"] == "delivered"

    await _eventually(delivered)
    [delivery] = await _deliveries(client, hook["id"])
    assert delivery["event_id"] == event.id
    assert [a["status"] for a in delivery["log"]] == [500, 500, 200]
    assert delivery["log"][0]["error"].startswith("HTTP 500")
    first, second, third = receivers.seen_at
    assert 0.35 < second - first < third - second  # 0.4 s, then 1.2 s
    assert {h["webhook-id"] for _, h, _ in receivers.raw} == {event.id}  # the same id each time


@pytest.mark.usefixtures("delivering")
async def test_an_endpoint_answering_410_is_disabled_and_redelivery_resends(
    client: httpx.AsyncClient, bus: NatsBus, db: Database, receivers: Receivers
) -> None:
    gone = await _create(client, receivers.url("gone"), "corral.job.failed.v1")
    live = await _create(client, receivers.url("live"), "corral.job.failed.v1")
    job = await _job(db, "admin")
    await publish(bus, failed(job))

    async def settled() -> bool:
        view = (await client.get(f"/api/v1/webhooks/{gone['id']}")).json()
        live_items = await _deliveries(client, live["id"])
        return not view["enabled"] and bool(live_items) and live_items[0]["state"] == "delivered"

    await _eventually(settled)
    view = (await client.get(f"/api/v1/webhooks/{gone['id']}")).json()
    assert "410" in view["disabled_reason"]
    [dead] = await _deliveries(client, gone["id"])
    assert (dead["state"], dead["last_status"], len(dead["log"])) == ("failed", 410, 1)
    await publish(bus, failed(job))
    await _eventually(lambda: _count(client, live["id"], 2))
    assert len(receivers.bodies("gone")) == 1  # nothing more was sent to it
    refused = await client.post(f"/api/v1/webhooks/{gone['id']}/deliveries/{dead['id']}/redeliver")
    assert refused.status_code == 409

    first = (await _deliveries(client, live["id"]))[-1]
    again = await client.post(f"/api/v1/webhooks/{live['id']}/deliveries/{first['id']}/redeliver")
    assert again.status_code == 202, again.text

    async def resent() -> bool:
        items = {d["id"]: d for d in await _deliveries(client, live["id"])}
        return len(items[first["id"]]["log"]) == 2 and items[first["id"]]["state"] == "delivered"

    await _eventually(resent)
    ids = [h["webhook-id"] for p, h, _ in receivers.raw if p == "live"]
    assert len(ids) == 3
    assert ids.count(first["event_id"]) == 2  # the same webhook-id, sent again
    missing = await client.post(f"/api/v1/webhooks/{live['id']}/deliveries/999999/redeliver")
    assert missing.status_code == 404


async def _count(client: httpx.AsyncClient, webhook_id: str, n: int) -> bool:
    return len([d for d in await _deliveries(client, webhook_id) if d["state"] == "delivered"]) >= n


async def test_an_event_delivered_twice_to_the_fan_in_is_queued_once(
    client: httpx.AsyncClient, db: Database
) -> None:
    hook = await _create(client, "http://127.0.0.1:9/unused", "corral.job.failed.v1")
    job = await _job(db, "admin")
    fan_in = WebhookFanIn(
        WebhookRepository(db), Scopes(EventRepository(db)), asyncio.Event(), asyncio.Event()
    )
    event = failed(job)
    await fan_in.handle(event)
    await fan_in.handle(event)  # a redelivery from JetStream
    assert [d["event_id"] for d in await _deliveries(client, hook["id"])] == [event.id]


class _StoppedClock:
    """``time`` for the fan-in: a monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return time.time()


async def test_the_fan_in_remembers_there_is_no_webhook_for_a_second_unless_one_is_created_here(
    client: httpx.AsyncClient, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhook_fanin, "NO_WEBHOOKS_RECHECK_S", 0.5)
    clock = _StoppedClock()  # the fan-in's second passes when the test says, however slow the machine
    monkeypatch.setattr(webhook_fanin, "time", clock)
    job = await _job(db, "admin")
    added_here: asyncio.Event = client._transport.app.state.webhooks_added  # type: ignore[attr-defined]
    here = WebhookFanIn(WebhookRepository(db), Scopes(EventRepository(db)), asyncio.Event(), added_here)
    elsewhere = WebhookFanIn(
        WebhookRepository(db), Scopes(EventRepository(db)), asyncio.Event(), asyncio.Event()
    )  # another API process
    for fan_in in (here, elsewhere):
        await fan_in.handle(failed(job))  # nothing subscribed: "none" is remembered
    hook = await _create(client, "http://127.0.0.1:9/unused", "corral.job.failed.v1")
    first, second, third = failed(job), failed(job), failed(job)
    await here.handle(first)  # created through this process: seen at once
    await elsewhere.handle(second)  # created through another: not within the second...
    clock.now += 0.6
    await elsewhere.handle(third)  # ...but after it
    queued = {d["event_id"] for d in await _deliveries(client, hook["id"])}
    assert queued == {first.id, third.id}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.com/x", "event_types": ["corral.job.failed.v1"]}, "url"),
        ({"url": "http://exa mple.com/", "event_types": ["corral.job.failed.v1"]}, "url"),
        ({"url": "not a url", "event_types": ["corral.job.failed.v1"]}, "url"),
        ({"url": "https://example.com/", "event_types": []}, "event_types"),
        ({"url": "https://example.com/", "event_types": ["corral.job.failed.v1"], "secret": "x"}, "secret"),
        (
            {
                "url": "https://example.com/",
                "event_types": ["corral.job.failed.v1"],
                "virtual_cluster": "../x",
            },
            "vir",
        ),
    ],
)
async def test_bad_webhooks_are_refused_naming_the_field_and_nothing_is_stored(
    client: httpx.AsyncClient, db: Database, body: dict[str, Any], field: str
) -> None:
    response = await client.post("/api/v1/webhooks", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert field in response.json()["detail"]
    assert await db.fetchval("SELECT count(*) FROM api.webhooks") == 0


@pytest.mark.parametrize(
    ("extra", "detail"),
    [
        ({"event_types": ["corral.job.exploded.v1"]}, "unknown event type 'corral.job.exploded.v1'"),
        ({"event_types": ["corral.metrics.*"]}, "unknown event type"),
        ({"event_types": ["corral.job.failed.v1"], "virtual_cluster": "nope"}, "'nope' does not exist"),
    ],
)
async def test_unknown_event_types_and_vcs_are_refused(
    client: httpx.AsyncClient, db: Database, extra: dict[str, Any], detail: str
) -> None:
    response = await client.post("/api/v1/webhooks", json={"url": "https://example.com/", **extra})
    assert response.status_code == 422, response.text
    assert detail in response.json()["detail"]
    assert await db.fetchval("SELECT count(*) FROM api.webhooks") == 0


async def test_a_user_sees_and_receives_only_their_own(
    client: httpx.AsyncClient, db: Database, bus: NatsBus, receivers: Receivers
) -> None:
    admins = await _create(client, receivers.url("admin"), "corral.job.*")
    await upsert_token(TenantRepository(db), "tok-alice", "alice", hash_token("crl_alice"), "user", "alice")
    async with httpx.AsyncClient(
        transport=client._transport, base_url=client.base_url, headers={"Authorization": "Bearer crl_alice"}
    ) as alice:
        mine = await _create(alice, receivers.url("alice"), "corral.job.*")
        assert [w["id"] for w in (await alice.get("/api/v1/webhooks")).json()["items"]] == [mine["id"]]
        assert "secret" not in (await alice.get(f"/api/v1/webhooks/{mine['id']}")).json()
        for call in (
            alice.get(f"/api/v1/webhooks/{admins['id']}"),
            alice.get(f"/api/v1/webhooks/{admins['id']}/deliveries"),
            alice.post(f"/api/v1/webhooks/{admins['id']}/rotate-secret"),
            alice.delete(f"/api/v1/webhooks/{admins['id']}"),
        ):
            response = await call
            assert response.status_code == 404, response.text
        refused = await alice.post(
            "/api/v1/webhooks",
            json={"url": receivers.url("x"), "event_types": ["corral.alert.rules_requested.v1"]},
        )
        assert refused.status_code == 422
        listed = (await client.get("/api/v1/webhooks")).json()["items"]
        assert {w["id"] for w in listed} == {admins["id"], mine["id"]}  # an admin sees every one

        fan_in = WebhookFanIn(
            WebhookRepository(db), Scopes(EventRepository(db)), asyncio.Event(), asyncio.Event()
        )
        alices, bobs = await _job(db, "alice"), await _job(db, "bob")
        for event in (running(alices), running(bobs), succeeded(alices)):
            await fan_in.handle(event)
        mine_queued = [
            d["event_type"]
            for d in (await alice.get(f"/api/v1/webhooks/{mine['id']}/deliveries")).json()["items"]
        ]
        assert mine_queued == ["corral.job.succeeded.v1", "corral.job.running.v1"]  # not bob's
        assert len(await _deliveries(client, admins["id"])) == 3

        assert (await alice.delete(f"/api/v1/webhooks/{mine['id']}")).status_code == 204
        assert (await alice.get(f"/api/v1/webhooks/{mine['id']}")).status_code == 404


async def test_corral_webhook_commands(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CORRAL_URL", api.url)
    monkeypatch.setenv("CORRAL_TOKEN", api.alice)

    async def corral(*argv: str) -> tuple[int, str, str]:
        code = await asyncio.to_thread(cli.main, list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = await corral("webhook", "create", "https://hooks.example.com/x", "--type", "corral.job.*")
    assert code == 0
    assert "signing secret (shown only now, keep it): whsec_" in out
    hook_id = out.split()[6]  # the first cell under the header
    assert hook_id.startswith("whk-")
    code, out, _ = await corral("webhooks")
    assert (code, out.splitlines()[1].split()[:3]) == (0, [hook_id, "alice", "yes"])
    code, out, _ = await corral("webhook", "deliveries", hook_id)
    assert (code, out.split()[:2]) == (0, ["DELIVERY", "EVENT"])
    code, _, err = await corral("webhook", "create", "https://x.example/", "--type", "corral.nope")
    assert code == 1
    assert "unknown event type 'corral.nope'" in err
    code, out, _ = await corral("webhook", "delete", hook_id)
    assert (code, out.strip()) == (0, f"webhook {hook_id} deleted")


@pytest.mark.slow
async def test_with_no_webhook_the_fan_in_takes_nothing_and_resumes_from_when_it_last_saw_none(
    client: httpx.AsyncClient, bus: NatsBus, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Paused, its durable consumer is left alone (nothing delivered, nothing acked); a
    webhook created through another API process gets the events from its creation on,
    not the pause's backlog."""
    monkeypatch.setattr(webhook_fanin, "NO_WEBHOOKS_RECHECK_S", 0.2)
    monkeypatch.setattr(webhook_fanin, "RESUME_MARGIN_S", 0.1)
    [config] = [c for c in webhook_fanin.WEBHOOK_CONSUMERS if c.stream == "CORRAL_JOBS"]
    fan_in = WebhookFanIn(
        WebhookRepository(db), Scopes(EventRepository(db)), asyncio.Event(), asyncio.Event()
    )  # not told of creations
    task = asyncio.create_task(webhook_fanin.run_fan_in(bus, config, fan_in, PostgresDeadLetters(db)))
    try:
        await asyncio.sleep(0.3)  # the durable exists
        before = await _job(db, "admin")
        await publish(bus, failed(before))
        await asyncio.sleep(1.0)
        info = await bus.js.consumer_info(config.stream, config.durable)
        assert (info.delivered.stream_seq, info.num_ack_pending, info.num_pending) == (0, 0, 1)

        hook = await _create(client, "http://127.0.0.1:9/unused", "corral.job.failed.v1")
        after = await _job(db, "admin")
        event = failed(after)
        await publish(bus, event)  # most likely before the fan-in has noticed the webhook

        async def queued() -> bool:
            return bool(await _deliveries(client, hook["id"]))

        await _eventually(queued, 5.0)
        await asyncio.sleep(0.3)
        assert [d["event_id"] for d in await _deliveries(client, hook["id"])] == [event.id]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
