"""The home page through the app on a real database: GPUs per type and per VC, jobs per
state, open alerts per severity, the cluster's utilisation chart, and the idle-GPU jobs
with what they held and used, each figure read from its table cell; the Stop button
for the owner and admins only, cancelling with a CSRF token and refused without."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from html.parser import HTMLParser

import httpx

from services.alerter.alert_lifecycle import open_alert
from services.alerter.routing import Routing
from services.alerter.rules import AlertDraft
from services.api.tenants.auth import hash_token
from services.api.tenants.repository import TenantRepository
from services.monitor.repository import HistoryRow, write_history
from shared.alert_rules import Severity
from shared.db.pool import Database
from tests.api.test_events_api import _job
from tests.api.test_vcs_api import _nodes
from tests.portal.conftest import Browser

BrowserFor = Callable[[str, str], Awaitable[Browser]]


class Tables(HTMLParser):
    """The text of every cell of every table, by the table's class: rows of cells."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: list[list[str]] | None = None
        self._cell: list[str] | None = None
        self._in_head = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br" and self._cell is not None:
            self._cell.append(" ")
        elif tag == "table":
            self._table = self.tables.setdefault(dict(attrs).get("class") or "", [])
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr" and self._table is not None and not self._in_head:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None and not self._in_head:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif tag == "thead":
            self._in_head = False
        elif tag in ("td", "th") and self._cell is not None and self._table is not None:
            self._table[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def tables_of(html: str) -> dict[str, list[list[str]]]:
    parser = Tables()
    parser.feed(html)
    return parser.tables


async def running_job(
    db: Database,
    user: str,
    vc: str,
    node: str,
    gpus: list[int],
    placed_ago: timedelta,
    borrowed: bool = False,
) -> tuple[str, datetime]:
    """A RUNNING job of generation 1 holding ``gpus`` of ``node`` since ``placed_ago``;
    returns its id and when it was placed."""
    job_id = await _job(db, user, vc)
    await db.execute(
        "UPDATE api.jobs SET state = 'RUNNING', generation = 1, total_gpus = $2 WHERE id = $1",
        job_id,
        len(gpus),
    )
    placed: datetime = await db.fetchval(
        "INSERT INTO scheduler.allocations (job_id, generation, task_role, task_index, node_id,"
        " gpu_indices, created_at, borrowed) VALUES ($1, 1, 'main', 0, $2, $3, now() - $4::interval, $5)"
        " RETURNING created_at",
        job_id,
        node,
        gpus,
        placed_ago,
        borrowed,
    )
    return job_id, placed


async def ended_job(db: Database, user: str, state: str, ended_ago: timedelta) -> str:
    job_id = await _job(db, user)
    await db.execute(
        "UPDATE api.jobs SET state = $2, finished_at = now() - $3::interval WHERE id = $1",
        job_id,
        state,
        ended_ago,
    )
    return job_id


async def readings(
    db: Database, node: str, utilisation: dict[int, float], lost: tuple[int, ...] = ()
) -> None:
    """The GPUs' latest readings, as the monitor writes them."""
    for index in sorted(set(utilisation) | set(lost)):
        await db.execute(
            "INSERT INTO monitor.gpu_readings (node_id, index, utilization_pct, lost) VALUES ($1, $2, $3, $4)"
            " ON CONFLICT (node_id, index) DO UPDATE SET utilization_pct = $3, lost = $4",
            node,
            index,
            utilisation.get(index),
            index in lost,
        )


async def history(
    db: Database,
    resolution_s: int,
    node: str,
    gpus: list[int],
    job_id: str | None,
    start: datetime,
    buckets: int,
    mean: float,
    peak: float,
    samples: int,
) -> list[HistoryRow]:
    """``buckets`` consecutive buckets from ``start`` for each GPU, as the monitor writes them."""
    rows = [
        HistoryRow(
            start + timedelta(seconds=resolution_s * k),
            node,
            gpu,
            job_id,
            samples,
            mean,
            peak,
            1000,
            50.0,
            200.0,
        )
        for gpu in gpus
        for k in range(buckets)
    ]
    async with db.transaction() as conn:
        await write_history(conn, resolution_s, rows)
    return rows


def _cells(html: str, table: str) -> list[list[str]]:
    found = tables_of(html)
    assert table in found, f"no table {table!r} in the page"
    return found[table]


def _idle_jobs(html: str) -> dict[str, list[str]]:
    """Idle jobs by id: owner, GPUs, held for, GPU-h held, GPU-h used, recent util., action."""
    rows = _cells(html, "home-idle-jobs") if "home-idle-jobs" in html else []
    return {row[0].split()[-1]: row[1:] for row in rows}


async def _seed_cluster(db: Database) -> dict[str, str]:
    """Three nodes (8 + 2 H100 ready, 4 A100 drained), two VCs besides default, six
    running jobs (two idle), and jobs waiting and ended. Returns the jobs by role."""
    await _nodes(
        db,
        ("n1", 8, "NVIDIA H100 80GB HBM3"),
        ("n2", 4, "NVIDIA A100-SXM4-80GB"),
        ("n3", 2, "NVIDIA H100 PCIe"),
    )
    await db.execute("UPDATE monitor.nodes SET drained_at = now(), drain_reason = 'PSU' WHERE id = 'n2'")
    await db.execute(
        "INSERT INTO api.virtual_clusters (name, quota, allowed_groups) VALUES"
        " ('vision', '{\"H100\": 6}', NULL), ('secret', '{\"A100\": 2}', '{}')"
    )
    idle, idle_since = await running_job(db, "alice", "vision", "n1", [0, 1], timedelta(hours=2))
    busy, _ = await running_job(db, "alice", "vision", "n1", [2, 3], timedelta(hours=2))
    bobs, bobs_since = await running_job(db, "bob", "default", "n1", [4], timedelta(hours=1), borrowed=True)
    spiked, spiked_since = await running_job(db, "alice", "vision", "n1", [5], timedelta(hours=1))
    unheard, _ = await running_job(db, "alice", "default", "n1", [6], timedelta(hours=1), borrowed=True)
    sparse, _ = await running_job(db, "alice", "default", "n3", [0], timedelta(hours=1), borrowed=True)
    await readings(db, "n1", {0: 3.0, 1: 3.0, 2: 90.0, 3: 92.0, 4: 2.0, 5: 1.0, 6: 0.0}, lost=(7,))
    await readings(db, "n3", {0: 0.0, 1: 0.0})

    # Alice's idle job: 80 minutes at 40 %, then 40 minutes at 4 % (peaks of 6 %).
    await history(db, 10, "n1", [0, 1], idle, idle_since, 480, 40.0, 45.0, 10)
    await history(db, 10, "n1", [0, 1], idle, idle_since + timedelta(minutes=80), 240, 4.0, 6.0, 10)
    # Her busy job, for the record: it is busy now.
    await history(db, 10, "n1", [2, 3], busy, idle_since, 720, 90.0, 99.0, 10)
    # Bob's idle job: its first half hour rolled up at 20 %, 10-second buckets after that
    # at 2 %; 10-second buckets the roll-up covers (at 99 %) must not count twice.
    rolled_from = datetime.fromtimestamp(bobs_since.timestamp() // 300 * 300, tz=bobs_since.tzinfo)
    await history(db, 300, "n4", [0], None, rolled_from, 1, 50.0, 50.0, 30)  # another GPU's bucket
    await history(db, 300, "n1", [4], bobs, rolled_from, 6, 20.0, 25.0, 30)
    covered_until = rolled_from + timedelta(minutes=30)
    await history(db, 10, "n1", [4], bobs, bobs_since, 60, 99.0, 99.0, 10)
    tail = int((datetime.now(bobs_since.tzinfo) - covered_until).total_seconds() // 10)
    await history(db, 10, "n1", [4], bobs, covered_until, tail, 2.0, 3.0, 10)
    # Quiet now, but it peaked at 50 % ten minutes ago: not idle.
    await history(db, 10, "n1", [5], spiked, spiked_since, 360, 1.0, 2.0, 10)
    await history(db, 10, "n1", [5], spiked, spiked_since + timedelta(minutes=50), 1, 30.0, 50.0, 10)
    # The unheard job has no history, the sparse one too little (20 of 180 buckets): no verdict.
    now = datetime.now(idle_since.tzinfo)
    await history(db, 10, "n3", [0], sparse, now - timedelta(minutes=5), 20, 1.0, 1.0, 10)

    pending = await _job(db, "alice", "vision")
    failed = await ended_job(db, "alice", "FAILED", timedelta(hours=1))
    await ended_job(db, "bob", "CANCELLED", timedelta(hours=3))
    await ended_job(db, "bob", "SUCCEEDED", timedelta(days=2))  # ended before the last 24 h
    return {
        "idle": idle,
        "busy": busy,
        "bobs": bobs,
        "spiked": spiked,
        "unheard": unheard,
        "sparse": sparse,
        "pending": pending,
        "failed": failed,
        "bobs_tail": str(tail),
    }


async def _alerts(db: Database, jobs: dict[str, str]) -> None:
    async with db.transaction() as conn:
        drafts: list[tuple[str, str, Severity, str, dict[str, str]]] = [
            ("JobFailed", "a1", "warning", "alice's job failed", {"job": jobs["failed"]}),
            ("GpuIdle", "a2", "warning", "bob's GPUs idle", {"job": jobs["bobs"]}),
            ("GpuUnhealthy", "a3", "critical", "node n2 drained", {"node": "n2"}),
        ]
        for rule, fingerprint, severity, summary, labels in drafts:
            assert await open_alert(conn, AlertDraft(rule, fingerprint, severity, summary, labels), Routing())


def _severity_counts(html: str) -> dict[str, int]:
    return {
        severity: int(count)
        for severity, count in re.findall(r'data-severity="(\w+)">\w+: <span class="num">(\d+)</span>', html)
    }


async def test_an_admin_sees_the_whole_cluster_in_numbers(db: Database, portal: Browser) -> None:
    jobs = await _seed_cluster(db)
    await _alerts(db, jobs)
    page = await portal.get("/")
    assert page.status_code == 200, page.text
    html = page.text
    assert 'sse-connect="/live/cluster?after=' in html

    assert _cells(html, "home-gpu-types") == [
        ["A100", "4", "0", "0", "4"],  # drained
        ["H100", "10", "8", "1", "1"],  # one lost
    ]
    assert _cells(html, "home-vcs") == [
        ["default", "H100", "0", "0", "3", "0"],
        ["secret", "A100", "2", "0", "0", "2"],
        ["vision", "H100", "6", "5", "0", "1"],
    ]
    assert {row[0]: row[1] for row in _cells(html, "home-job-states")} == {
        "PENDING": "1",
        "SCHEDULED": "0",
        "RUNNING": "6",
        "SUCCEEDED": "0",
        "FAILED": "1",
        "CANCELLED": "1",
    }
    assert _severity_counts(html) == {"critical": 1, "warning": 2, "info": 0}
    assert html.count('data-alert="alr-') == 3

    idle = _idle_jobs(html)
    assert set(idle) == {jobs["idle"], jobs["bobs"]}  # busy, spiked, unheard, sparse are not
    # Alice's: 2 GPUs for 2 h; mean over the held time (80 min at 40 %, 40 at 4 %) 28 %.
    assert idle[jobs["idle"]][:6] == ["alice", "2", "2 h", "4.00", "1.12", "4.0 %"]
    # Bob's: 1 GPU for 1 h; the roll-up's 180 samples at 20 %, then its tail at 2 %.
    tail = int(jobs["bobs_tail"])
    mean = (180 * 20.0 + tail * 10 * 2.0) / (180 + tail * 10)
    assert idle[jobs["bobs"]][:6] == ["bob", "1", "1 h", "1.00", f"{mean / 100:.2f}", "2.0 %"]
    assert all(row[6] == "Stop" for row in idle.values())  # an admin may stop anyone's
    words = " ".join(html.replace("&nbsp;", " ").split())
    assert "every GPU has stayed under 10 % utilisation for the last 30 minutes" in words


async def test_the_utilisation_chart_averages_every_gpu_per_bucket(
    db: Database, browser_for: BrowserFor
) -> None:
    await _nodes(db, ("n3", 2, "NVIDIA H100 PCIe"))
    now = datetime.now().astimezone()
    first = datetime.fromtimestamp((now.timestamp() - 20 * 3600) // 300 * 300, tz=now.tzinfo)
    await history(db, 300, "n3", [0], None, first, 2, 30.0, 40.0, 30)
    await history(db, 300, "n3", [1], None, first, 1, 60.0, 70.0, 10)
    await history(db, 300, "n3", [1], None, first - timedelta(days=2), 1, 60.0, 70.0, 10)  # too old
    await history(db, 10, "n3", [1], None, first, 1, 100.0, 100.0, 10)  # the fine history is not charted
    # Signed in only now: the series is read once a minute, and signing in opens the page.
    portal = await browser_for("root", "admin")
    html = (await portal.get("/home/utilisation")).text
    found = re.search(r"data-chart='([^']+)'", html)
    assert found is not None
    chart = json.loads(found.group(1).replace("&#34;", '"').replace("&quot;", '"'))
    assert chart["x"] == [int(first.timestamp()), int(first.timestamp()) + 300]
    # (30 % x 30 samples + 60 % x 10) / 40, then GPU 0 alone.
    assert chart["series"][0]["values"] == [37.5, 30.0]
    assert chart["max"] == 100
    assert re.search(r'id="home-utilisation-latest">30&nbsp;%', html)


async def test_the_minutes_not_rolled_up_yet_are_charted_from_the_fine_history(
    db: Database, browser_for: BrowserFor
) -> None:
    await _nodes(db, ("n4", 1, "NVIDIA H100 PCIe"))
    now = datetime.now().astimezone()
    coarse = datetime.fromtimestamp((now.timestamp() - 3600) // 300 * 300, tz=now.tzinfo)
    await history(db, 300, "n4", [0], None, coarse, 1, 20.0, 20.0, 30)
    # A cluster started minutes ago: six 10 s buckets since the last coarse one ended,
    # and one fine bucket the coarse one already holds (not counted twice).
    recent = datetime.fromtimestamp((now.timestamp() - 600) // 300 * 300, tz=now.tzinfo)
    await history(db, 10, "n4", [0], None, recent, 6, 80.0, 90.0, 1)
    await history(db, 10, "n4", [0], None, coarse, 1, 100.0, 100.0, 1)
    portal = await browser_for("root", "admin")
    html = (await portal.get("/home/utilisation")).text
    found = re.search(r"data-chart='([^']+)'", html)
    assert found is not None
    chart = json.loads(found.group(1).replace("&#34;", '"').replace("&quot;", '"'))
    assert chart["x"] == [int(coarse.timestamp()), int(recent.timestamp())]
    assert chart["series"][0]["values"] == [20.0, 80.0]


async def test_a_user_sees_their_own_jobs_alerts_vcs_and_idle_jobs(
    db: Database, browser_for: BrowserFor
) -> None:
    jobs = await _seed_cluster(db)
    await _alerts(db, jobs)
    alice = await browser_for("alice", "user")
    html = (await alice.get("/")).text
    assert "Your jobs" in html
    assert {row[0]: row[1] for row in _cells(html, "home-job-states")} == {
        "PENDING": "1",
        "SCHEDULED": "0",
        "RUNNING": "5",
        "SUCCEEDED": "0",
        "FAILED": "1",
        "CANCELLED": "0",
    }
    assert _severity_counts(html) == {"critical": 0, "warning": 1, "info": 0}
    assert "alice&#39;s job failed" in html
    assert "bob&#39;s GPUs idle" not in html
    assert [row[0] for row in _cells(html, "home-vcs")] == ["default", "vision"]  # not the admins' VC
    # The cluster's GPUs are everyone's to see.
    assert _cells(html, "home-gpu-types")[1] == ["H100", "10", "8", "1", "1"]
    idle = _idle_jobs(html)
    assert list(idle) == [jobs["idle"]]
    assert idle[jobs["idle"]][6] == "Stop"

    bob = await browser_for("bob", "user")
    bob_idle = _idle_jobs((await bob.get("/")).text)
    assert list(bob_idle) == [jobs["bobs"]]
    carol = await browser_for("carol", "user")
    carol_html = (await carol.get("/home/idle")).text
    assert _idle_jobs(carol_html) == {}
    assert "No job of yours is holding idle GPUs" in carol_html


async def test_stop_cancels_an_idle_job_for_its_owner_with_a_csrf_token(
    db: Database, browser_for: BrowserFor
) -> None:
    jobs = await _seed_cluster(db)
    alice = await browser_for("alice", "user")
    await alice.get("/")
    stop = f"/home/idle/{jobs['idle']}/stop"

    async def cancel_requests() -> list[str]:
        rows = await db.fetch("SELECT subject FROM corral.outbox WHERE subject LIKE 'corral.job.cancel%'")
        return [r["subject"] for r in rows]

    refused = await alice.post(stop, csrf=False)
    assert refused.status_code == 403
    assert "CSRF" in refused.text
    forged = await alice.post(stop, {"csrf_token": "0" * 64})
    assert forged.status_code == 403
    # Someone else's job is not found, as the API answers it.
    other = await alice.post(f"/home/idle/{jobs['bobs']}/stop")
    assert other.status_code == 404
    assert await cancel_requests() == []
    assert await db.fetchval("SELECT count(*) FROM api.jobs WHERE cancel_requested_at IS NOT NULL") == 0

    stopped = await alice.post(stop)
    assert stopped.status_code == 303
    assert stopped.headers["location"] == "/"
    assert await cancel_requests() == [f"corral.job.cancel_requested.{jobs['idle']}"]
    # The job stops through the launcher; meanwhile the panel says so, without a button.
    row = _idle_jobs((await alice.get("/")).text)[jobs["idle"]]
    assert row[6] == "stopping"

    # Through htmx the panel comes back, with a notice swapped in beside it.
    admin = await browser_for("root", "admin")
    await admin.get("/")
    response = await admin.http.post(
        f"/home/idle/{jobs['bobs']}/stop",
        data={"csrf_token": admin.csrf},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    assert f"stop requested for {jobs['bobs']}" in response.text
    assert _idle_jobs(response.text)[jobs["bobs"]][6] == "stopping"
    ended = await admin.post(f"/home/idle/{jobs['failed']}/stop")
    assert ended.status_code == 409
    assert "already ended FAILED" in ended.text


async def test_a_broken_stop_is_refused_with_a_page(db: Database, portal: Browser) -> None:
    await portal.get("/")
    bad = await portal.post("/home/idle/not-a-job/stop")
    assert bad.status_code == 422
    assert "job_id" in bad.text
    missing = await portal.post("/home/idle/job-doesnotexist/stop")
    assert missing.status_code == 404
    assert "no job with id" in missing.text


async def test_a_read_only_session_sees_idle_jobs_without_a_stop_button(
    db: Database, portal_app: object
) -> None:
    jobs = await _seed_cluster(db)
    await TenantRepository(db).upsert_token(
        "tok-alice-ro", "read only", hash_token("crl_alice_ro"), "alice", "user", ["read"]
    )
    transport = httpx.ASGITransport(app=portal_app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://corral.test") as http:
        alice = Browser(http)
        assert (await alice.sign_in("crl_alice_ro")).status_code == 303
        row = _idle_jobs((await alice.get("/")).text)[jobs["idle"]]
        assert row[:2] == ["alice", "2"]
        assert row[6] == ""  # no button: cancelling takes the submit scope
        refused = await alice.post(f"/home/idle/{jobs['idle']}/stop")
        assert refused.status_code == 403
    assert await db.fetchval("SELECT count(*) FROM api.jobs WHERE cancel_requested_at IS NOT NULL") == 0
