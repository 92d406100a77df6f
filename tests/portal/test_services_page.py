"""The services pages through the app: the list (replicas ready out of wanted, state and
why, endpoint) and one service's replicas (readiness, restarts, node, a link to each
replica's job, which links back and offers no resubmit), with the API's visibility: a
service is its owner's and the admins'.

Services and replicas are rows as the service controller and the launcher leave them
(``tests/api/serving_replicas.py``); no replica process is needed to render a page."""

from __future__ import annotations

import html
import re
from collections.abc import Awaitable, Callable

from shared.db.pool import Database
from tests.api.serving_replicas import add_replica, add_service
from tests.portal.conftest import Browser


def _text(page: str) -> str:
    """The page's visible words, one space between them."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def _row(page: str, attribute: str, value: str) -> str:
    found = re.search(rf'<tr {attribute}="{re.escape(value)}">(.*?)</tr>', page, re.S)
    assert found, f"no row {attribute}={value} in:\n{page}"
    return _text(found.group(1))


async def _services(db: Database) -> tuple[str, str]:
    """alice's ``points`` wants 2 replicas and has 1 ready, 1 failing its probe; bob has
    ``ledger``, ready. The two replica job ids of ``points``."""
    await add_service(db, "points", "alice", replicas=2)
    ready = await add_replica(db, "points", 40001, owner="alice")
    loading = await add_replica(db, "points", 40002, ready=False, detail="GET /healthz: 503", owner="alice")
    await add_service(db, "ledger", "bob", replicas=1, public=True)
    await add_replica(db, "ledger", 40003, owner="bob")
    return ready, loading


async def test_the_services_page_lists_each_service_with_its_state_and_reason(
    portal: Browser, db: Database
) -> None:
    await _services(db)
    page = await portal.get("/services")
    assert page.status_code == 200
    assert 'href="/services" aria-current="page"' in page.text  # in the nav, and the section
    points = _row(page.text, "data-service", "points")
    assert "alice" in points
    assert "1/2" in points
    assert "Progressing" in points
    assert "1 of 2 replicas ready" in points
    assert "not ready: GET /healthz: 503" in points
    assert "/serve/points/" in points
    ledger = _row(page.text, "data-service", "ledger")
    assert "1/1" in ledger
    assert "Ready" in ledger
    assert "public" in ledger
    assert 'href="/services/points"' in page.text


async def test_a_user_sees_only_their_own_services(
    browser_for: Callable[[str, str], Awaitable[Browser]], db: Database
) -> None:
    await _services(db)
    alice = await browser_for("alice", "user")
    page = await alice.get("/services")
    assert 'data-service="points"' in page.text
    assert 'data-service="ledger"' not in page.text
    assert "Your services" in page.text
    refused = await alice.get("/services/ledger")
    assert refused.status_code == 404
    assert "no service 'ledger'" in _text(refused.text)
    carol = await browser_for("carol", "user")
    empty = await carol.get("/services")
    assert "No services of yours" in _text(empty.text)


async def test_a_service_page_lists_its_replicas_with_readiness_and_links_to_their_jobs(
    browser_for: Callable[[str, str], Awaitable[Browser]], db: Database
) -> None:
    ready, loading = await _services(db)
    await db.execute("UPDATE api.jobs SET generation = 4 WHERE id = $1", loading)  # placed 4 times
    alice = await browser_for("alice", "user")
    page = await alice.get("/services/points")
    assert page.status_code == 200
    words = _text(page.text)
    assert "Service points" in words
    assert "1 of 2 ready" in words
    assert "with a token that has the serve scope" in words
    first = _row(page.text, "data-job", ready)
    assert first.split() == [ready, "1", "Ready", "ready", "0", "node-t", *first.split()[6:]]
    second = _row(page.text, "data-job", loading)
    assert "Running" in second
    assert "not ready · GET /healthz: 503" in second
    assert " 3 node-t " in f" {second} "  # restarts: placements after the first
    for job_id in (ready, loading):
        assert f'href="/jobs/{job_id}"' in page.text
    assert 'href="/nodes/node-t"' in page.text


async def test_a_replica_job_page_links_to_its_service_and_offers_no_resubmit(
    portal: Browser, db: Database
) -> None:
    ready, _ = await _services(db)
    # The controller names the service in each replica's environment.
    await db.execute(
        "UPDATE api.jobs SET spec = jsonb_set(spec, '{tasks,0,env}',"
        ' \'{"CORRAL_SERVICE_NAME": "points", "CORRAL_SERVICE_REVISION": "1"}\') WHERE id = $1',
        ready,
    )
    page = await portal.get(f"/jobs/{ready}")
    assert page.status_code == 200
    link = '<dd class="replica-of"><a href="/services/points">points</a>, a replica of revision 1</dd>'
    assert link in page.text
    # The service's controller replaces its replicas: a resubmit would make a stray one.
    assert f'action="/jobs/{ready}/resubmit"' not in page.text
    jobs = await db.fetchval("SELECT count(*) FROM api.jobs")
    refused = await portal.post(f"/jobs/{ready}/resubmit")
    assert refused.status_code == 422
    assert "a service's replica is not resubmitted" in html.unescape(refused.text)
    assert await db.fetchval("SELECT count(*) FROM api.jobs") == jobs


async def test_the_panels_refresh_themselves_through_the_same_routes(portal: Browser, db: Database) -> None:
    await _services(db)
    listing = await portal.get("/services")
    assert 'sse-connect="/live/services?after=' in listing.text
    panel = await portal.get("/services", headers={"HX-Request": "true"})
    assert panel.text.lstrip().startswith('<section class="card services-table"')
    assert 'hx-get="/services"' in panel.text
    detail = await portal.get("/services/points", headers={"HX-Request": "true"})
    assert detail.text.lstrip().startswith('<div id="service-detail" hx-get="/services/points"')
    assert "<html" not in detail.text


async def test_unknown_and_malformed_service_names(portal: Browser) -> None:
    missing = await portal.get("/services/nope")
    assert missing.status_code == 404
    assert '<main id="main"' in missing.text  # the portal's page, not a problem document
    assert (await portal.get("/services/Not%20A%20Name")).status_code == 422
