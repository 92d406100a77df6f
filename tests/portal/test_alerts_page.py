"""The alerts page through the app: alerts listed by state with their severity, labels and
links; acknowledge and silence are the API's requests for the alerter, with a CSRF token
and the API's validation; a user sees and may acknowledge the alerts about their own
jobs, as the API lets them, but never silences; a read-only session gets no forms."""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable
from html.parser import HTMLParser

import pytest

from services.alerter.alert_lifecycle import acknowledge, open_alert, resolve
from services.alerter.routing import Routing
from services.alerter.rules import AlertDraft
from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.api.tenants.auth import hash_token
from services.api.tenants.repository import TenantRepository
from shared.db.pool import Database
from shared.events import parse_event
from shared.events.alerts import AlertActionRequested, SilenceRequested
from shared.jobs import JobSpec
from tests.portal.conftest import Browser


async def _alerts(db: Database) -> dict[str, str]:
    """alice's job failed (firing, warning); GPU trouble on n1 (firing, critical); a slow
    node (acknowledged, info); a flapping one (resolved)."""
    spec = JobSpec.model_validate({"name": "t", "tasks": [{"name": "main", "command": "true"}]})
    job_id = (await Submitter(JobRepository(db)).submit(spec, "alice", None)).job.id
    drafts = {
        "job": AlertDraft("JobFailed", f"JobFailed/{job_id}", "warning", "job failed", {"job": job_id}),
        "gpu": AlertDraft(
            "GpuUnhealthy", "GpuUnhealthy/n1", "critical", "node n1 drained", {"node": "n1", "gpu": "3"}
        ),
        "slow": AlertDraft("NodeSlow", "NodeSlow/n2", "info", "node n2 is slow", {"node": "n2"}),
        "flap": AlertDraft("NodeFlapping", "NodeFlapping/n3", "warning", "node n3 flaps", {"node": "n3"}),
    }
    ids: dict[str, str] = {"job_id": job_id}
    async with db.transaction() as conn:
        for key, draft in drafts.items():
            opened = await open_alert(conn, draft, Routing())
            assert opened is not None
            ids[key] = opened
        assert await acknowledge(conn, ids["slow"], "root", "looking", Routing())
        assert await resolve(conn, ids["flap"], "alerter", "steady again", Routing())
    return ids


class AlertRows(HTMLParser):
    """Each alert row: its id, state, severity badge, label links and action forms."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, object]] = {}
        self._row: dict[str, object] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "tr" and found.get("data-alert"):
            self._row = {"state": found["data-state"], "severity": None, "links": [], "forms": []}
            self.rows[found["data-alert"] or ""] = self._row
        elif self._row is None:
            return
        elif tag == "span" and "badge" in (found.get("class") or "") and self._row["severity"] is None:
            self._row["severity"] = (found.get("class") or "").split()[-1]
        elif tag == "a":
            self._row["links"].append(found["href"])  # type: ignore[attr-defined]
        elif tag == "form":
            self._row["forms"].append(found["action"])  # type: ignore[attr-defined]

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._row = None


def alert_rows(page: str) -> dict[str, dict[str, object]]:
    parser = AlertRows()
    parser.feed(page)
    return parser.rows


async def test_alerts_are_listed_by_state_with_severity_and_links(portal: Browser, db: Database) -> None:
    ids = await _alerts(db)
    firing = await portal.get("/alerts")
    assert firing.status_code == 200, firing.text
    rows = alert_rows(firing.text)
    assert list(rows) == [ids["gpu"], ids["job"]]
    assert rows[ids["gpu"]]["severity"] == "sev-critical"
    assert rows[ids["gpu"]]["links"] == ["/nodes/n1"]
    assert rows[ids["job"]]["severity"] == "sev-warning"
    assert rows[ids["job"]]["links"] == [f"/jobs/{ids['job_id']}"]
    assert rows[ids["gpu"]]["forms"] == [f"/alerts/{ids['gpu']}/acknowledge", "/alerts/silence"]
    assert 'aria-current="page">Firing' in firing.text

    acknowledged = alert_rows((await portal.get("/alerts?state=acknowledged")).text)
    assert list(acknowledged) == [ids["slow"]]
    assert acknowledged[ids["slow"]]["forms"] == ["/alerts/silence"]  # acknowledged already
    resolved = alert_rows((await portal.get("/alerts?state=resolved")).text)
    assert list(resolved) == [ids["flap"]]
    assert resolved[ids["flap"]]["forms"] == []
    everything = alert_rows((await portal.get("/alerts?state=all")).text)
    assert set(everything) == {ids["gpu"], ids["job"], ids["slow"], ids["flap"]}

    broken = await portal.get("/alerts?state=sleeping")
    assert broken.status_code == 422
    assert "state" in broken.text
    assert "firing" in broken.text


async def test_the_panel_refreshes_itself_unless_a_form_is_open(portal: Browser, db: Database) -> None:
    await _alerts(db)
    page = await portal.get("/alerts?state=all")
    assert 'sse-connect="/live/alerts?after=' in page.text
    assert (
        'hx-get="/alerts?state=all" hx-trigger="sse:changed[!this.querySelector(\'details[open]\')]"'
        in page.text
    )
    panel = await portal.get("/alerts?state=all", headers={"HX-Request": "true"})
    assert "<html" not in panel.text
    assert alert_rows(panel.text) == alert_rows(page.text)


async def _action_requests(db: Database) -> list[AlertActionRequested]:
    rows = await db.fetch("SELECT payload FROM corral.outbox WHERE subject LIKE 'corral.alert.action%'")
    events = [parse_event(r["payload"]) for r in rows]
    assert all(isinstance(e, AlertActionRequested) for e in events)
    return events  # type: ignore[return-value]


async def test_acknowledge_is_requested_then_applied_by_the_alerter(portal: Browser, db: Database) -> None:
    ids = await _alerts(db)
    await portal.get("/alerts")
    forged = await portal.post(f"/alerts/{ids['gpu']}/acknowledge", {"note": "on it"}, csrf=False)
    assert forged.status_code == 403
    assert "CSRF" in forged.text
    assert await _action_requests(db) == []

    accepted = await portal.post(f"/alerts/{ids['gpu']}/acknowledge", {"note": "on it", "back_to": "all"})
    assert accepted.status_code == 303, accepted.text
    assert accepted.headers["location"] == "/alerts?state=all&requested=acknowledge"
    (request,) = await _action_requests(db)
    assert (request.data.alert_id, request.data.action, request.data.by, request.data.note) == (
        ids["gpu"],
        "acknowledge",
        "root",
        "on it",
    )
    async with db.transaction() as conn:  # what the alerter does with the request
        assert await acknowledge(conn, request.data.alert_id, request.data.by, request.data.note, Routing())
    assert await db.fetchval("SELECT state FROM alerter.alerts WHERE id = $1", ids["gpu"]) == "acknowledged"
    shown = await portal.get(accepted.headers["location"])
    assert "Acknowledge requested" in shown.text
    assert alert_rows(shown.text)[ids["gpu"]]["state"] == "acknowledged"
    assert "by root" in shown.text

    again = await portal.post(f"/alerts/{ids['gpu']}/acknowledge", {"note": "twice"})
    assert again.status_code == 409
    assert "only a firing alert can be acknowledged" in again.text
    too_long = await portal.post(f"/alerts/{ids['job']}/acknowledge", {"note": "x" * 1001})
    assert too_long.status_code == 422
    assert "note" in too_long.text
    assert (await portal.post("/alerts/alr-nope/acknowledge", {})).status_code == 404
    assert len(await _action_requests(db)) == 1


async def _silence_requests(db: Database) -> list[SilenceRequested]:
    rows = await db.fetch("SELECT payload FROM corral.outbox WHERE subject LIKE 'corral.alert.silence%'")
    return [parse_event(r["payload"]) for r in rows]  # type: ignore[misc]


async def test_a_silence_takes_the_alerts_labels_and_a_duration(portal: Browser, db: Database) -> None:
    ids = await _alerts(db)
    page = await portal.get("/alerts")
    assert 'name="matcher" value="gpu=3" checked' in page.text
    accepted = await portal.post(
        "/alerts/silence",
        {"matcher": "node=n1", "duration_s": "14400", "comment": "PSU swap", "back_to": "firing"},
    )
    assert accepted.status_code == 303, accepted.text
    assert accepted.headers["location"] == "/alerts?state=firing&requested=silence"
    (request,) = await _silence_requests(db)
    assert [m.model_dump() for m in request.data.matchers] == [{"name": "node", "op": "=", "value": "n1"}]
    assert request.data.by == "root"
    assert request.data.comment == "PSU swap"
    assert request.data.starts_at is not None
    assert request.data.ends_at is not None
    assert (request.data.ends_at - request.data.starts_at).total_seconds() == 14400
    assert ids["gpu"]


@pytest.mark.parametrize(
    ("form", "message"),
    [
        (
            {"matcher": "node=n1", "duration_s": "10"},
            "duration_s: Input should be greater than or equal to 60",
        ),
        ({"matcher": "node=n1", "duration_s": "soon"}, "duration_s: Input should be a valid integer"),
        (
            {"matcher": "node=n1", "duration_s": "99999999"},
            "duration_s: Input should be less than or equal to 7776000",
        ),
        ({"matcher": "node=n1"}, "give exactly one of ends_at and duration_s"),
        ({"duration_s": "3600"}, "matchers: List should have at least 1 item"),
        ({"matcher": "no de=n1", "duration_s": "3600"}, "matchers.0.name: String should match pattern"),
    ],
)
async def test_a_bad_silence_is_refused_with_the_apis_words_and_nothing_requested(
    portal: Browser, db: Database, form: dict[str, str], message: str
) -> None:
    await _alerts(db)
    await portal.get("/alerts")
    refused = await portal.post("/alerts/silence", form)
    assert refused.status_code == 422
    assert message in html.unescape(refused.text)
    assert await _silence_requests(db) == []


async def test_a_user_acknowledges_their_jobs_alerts_as_the_api_lets_them_and_never_silences(
    browser_for: Callable[[str, str], Awaitable[Browser]], db: Database
) -> None:
    ids = await _alerts(db)
    alice = await browser_for("alice", "user")
    page = await alice.get("/alerts?state=all")
    rows = alert_rows(page.text)
    assert list(rows) == [ids["job"]]  # the alert about her job, none of the nodes'
    assert rows[ids["job"]]["forms"] == [f"/alerts/{ids['job']}/acknowledge"]  # no silence form
    refused = await alice.post("/alerts/silence", {"matcher": f"job={ids['job_id']}", "duration_s": "3600"})
    assert refused.status_code == 403
    assert "admin" in refused.text
    assert await _silence_requests(db) == []
    hidden = await alice.post(f"/alerts/{ids['gpu']}/acknowledge", {"note": "not mine"})
    assert hidden.status_code == 404  # as the API: an alert she cannot see does not exist
    accepted = await alice.post(f"/alerts/{ids['job']}/acknowledge", {"note": "mine"})
    assert accepted.status_code == 303
    (request,) = await _action_requests(db)
    assert (request.data.alert_id, request.data.by) == (ids["job"], "alice")


async def test_a_read_only_session_sees_alerts_without_forms(
    db: Database, sign_in_with: Callable[[str], Awaitable[Browser]]
) -> None:
    ids = await _alerts(db)
    await TenantRepository(db).upsert_token(
        "tok-ro", "ro", hash_token("crl_alice_ro"), "alice", "user", ["read"]
    )
    reader = await sign_in_with("crl_alice_ro")
    page = await reader.get("/alerts?state=all")
    assert alert_rows(page.text)[ids["job"]]["forms"] == []
    refused = await reader.post(f"/alerts/{ids['job']}/acknowledge", {"note": "mine"})
    assert refused.status_code == 403
    assert await _action_requests(db) == []
