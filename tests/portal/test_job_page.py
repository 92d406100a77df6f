"""A job's page (``/jobs/{id}``): its tasks and attempts, why it waits, its timeline, GPU
charts and logs; cancel and resubmit through the API's own decisions; who may see it; and
that it follows the job live only until the job has finished."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from html import unescape
from html.parser import HTMLParser

import pytest

from services.api.portal.routes_job import timeline_entry
from services.api.portal.routes_job_logs import FOLLOWING_ENDED
from shared.clock import utcnow
from shared.db.pool import Database
from shared.node_logs import LogChunk, LogRequest
from tests.portal.conftest import Browser
from tests.portal.test_jobs_page import SignIn, insert_attempt, insert_job


class Attempts(HTMLParser):
    """The rows of the tasks table: each ``<tr data-task>``'s cells as text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr" and dict(attrs).get("data-task"):
            self.rows.append([])
        elif tag == "td" and self.rows:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def attempt_rows(html: str) -> list[list[str]]:
    parser = Attempts()
    parser.feed(html)
    return parser.rows


def connected(html: str) -> bool:
    return re.search(r'sse-connect="/live/job\?job=job-[0-9a-z]+&amp;after=[0-9.]*"', html) is not None


async def test_tasks_and_their_attempts_are_listed_with_node_gpus_ports_and_ending(
    db: Database, portal: Browser
) -> None:
    now = utcnow()
    job = await insert_job(db, user="root", state="RUNNING", instances=3)
    await insert_attempt(
        db,
        job,
        state="EXITED",
        started=now - timedelta(minutes=9),
        finished=now - timedelta(minutes=8),
        exit_code=137,
        classification="transient",
        reason="node lost",
    )
    await insert_attempt(db, job, attempt_no=2, node="node-b", started=now - timedelta(minutes=5))
    await insert_attempt(db, job, task_index=1, started=now - timedelta(minutes=5))
    page = await portal.get(f"/jobs/{job}")
    assert page.status_code == 200
    rows = attempt_rows(page.text)
    assert [r[:8] for r in rows[:3]] == [
        ["main-0", "1", "EXITED", "node-a", "2,3", "master: 29500", "137", "transient: node lost"],
        ["main-0", "2", "RUNNING", "node-b", "2,3", "master: 29500", "—", ""],
        ["main-1", "1", "RUNNING", "node-a", "2,3", "master: 29500", "—", ""],
    ]
    assert rows[3] == ["main-2", "not placed yet"]
    # The spec, readable.
    assert "command: python train.py" in unescape(page.text)


async def test_why_a_pending_job_waits(db: Database, portal: Browser) -> None:
    job = await insert_job(db, user="root")
    page = await portal.get(f"/jobs/{job}")
    assert "The scheduler has not considered it yet." in page.text
    start = utcnow() + timedelta(hours=2)
    other = await insert_job(db, user="root")
    await db.execute(
        "INSERT INTO scheduler.pending_status (job_id, reason, detail, estimated_start)"
        " VALUES ($1, 'InsufficientGPUs', 'needs 8 GPUs of one node; the freest node has 4', $2)",
        job,
        start,
    )
    await db.execute(
        "INSERT INTO scheduler.queue_order (job_ids) VALUES ($1)"
        " ON CONFLICT (only_row) DO UPDATE SET job_ids = EXCLUDED.job_ids",
        [other, job],
    )
    html = (await portal.get(f"/jobs/{job}")).text
    reason = re.search(r'class="pending-reason">([^<]*)<', html)
    position = re.search(r'class="pending-position">([^<]*)<', html)
    expected = re.search(r'class="pending-start">([^<]*)<', html)
    assert reason
    assert position
    assert expected
    assert (reason.group(1), position.group(1)) == ("InsufficientGPUs", "2")
    assert expected.group(1) == start.strftime("%Y-%m-%d %H:%M:%S UTC")
    assert "needs 8 GPUs of one node; the freest node has 4" in html
    # A job that runs has nothing to wait for.
    await db.execute("UPDATE api.jobs SET state = 'RUNNING' WHERE id = $1", job)
    assert "Why it is waiting" not in (await portal.get(f"/jobs/{job}")).text


async def test_someone_elses_job_or_an_unknown_one_is_not_found(db: Database, browser_for: SignIn) -> None:
    theirs = await insert_job(db, user="bob", state="RUNNING")
    await insert_attempt(db, theirs)
    alice = await browser_for("alice", "user")
    for path in (
        f"/jobs/{theirs}",
        f"/jobs/{theirs}/panel",
        f"/jobs/{theirs}/tasks/main-0/log?attempt=1",
        "/jobs/job-doesnotexist",
    ):
        page = await alice.get(path)
        assert page.status_code == 404, path
        assert "Not found" in page.text
        assert "bob" not in page.text
    await alice.get("/jobs")
    refused = await alice.post(f"/jobs/{theirs}/cancel")
    assert refused.status_code == 404
    assert await db.fetchval("SELECT cancel_requested_at FROM api.jobs WHERE id = $1", theirs) is None
    assert (await alice.post(f"/jobs/{theirs}/resubmit")).status_code == 404
    assert await db.fetchval("SELECT count(*) FROM api.jobs") == 1


async def test_cancel_needs_the_csrf_token_and_the_owner(db: Database, browser_for: SignIn) -> None:
    job = await insert_job(db, user="alice")
    alice = await browser_for("alice", "user")
    page = await alice.get(f"/jobs/{job}")
    assert re.search(rf'<form method="post" action="/jobs/{job}/cancel"', page.text)
    forged = await alice.post(f"/jobs/{job}/cancel", csrf=False)
    assert forged.status_code == 403
    assert "CSRF token" in forged.text
    wrong = await alice.post(f"/jobs/{job}/cancel", {"csrf_token": "0" * 64})
    assert wrong.status_code == 403
    assert await db.fetchval("SELECT state FROM api.jobs WHERE id = $1", job) == "PENDING"
    done = await alice.post(f"/jobs/{job}/cancel")
    assert done.status_code == 303
    assert done.headers["location"] == f"/jobs/{job}"
    assert await db.fetchval("SELECT state FROM api.jobs WHERE id = $1", job) == "CANCELLED"
    after = await alice.get(f"/jobs/{job}")
    assert "cancelled by alice before it was scheduled" in after.text
    assert f'action="/jobs/{job}/cancel"' not in after.text  # nothing left to cancel
    again = await alice.post(f"/jobs/{job}/cancel")
    assert again.status_code == 409
    assert "already ended CANCELLED" in again.text


async def test_cancelling_a_running_job_asks_its_tasks_to_stop(db: Database, portal: Browser) -> None:
    job = await insert_job(db, user="alice", state="RUNNING")
    await portal.get(f"/jobs/{job}")
    assert (await portal.post(f"/jobs/{job}/cancel")).status_code == 303
    row = await db.fetchrow("SELECT state, cancel_requested_at FROM api.jobs WHERE id = $1", job)
    assert row is not None
    assert row["state"] == "RUNNING"
    assert row["cancel_requested_at"] is not None
    assert "Stopping…" in (await portal.get(f"/jobs/{job}")).text


async def test_resubmit_makes_a_new_job_for_the_user_and_goes_to_it(
    db: Database, browser_for: SignIn
) -> None:
    old = await insert_job(db, user="alice", name="resnet", state="FAILED", finished=utcnow())
    await db.execute("UPDATE api.jobs SET tags = '{team:vision}' WHERE id = $1", old)
    alice = await browser_for("alice", "user")
    await alice.get(f"/jobs/{old}")
    answer = await alice.post(f"/jobs/{old}/resubmit")
    assert answer.status_code == 303
    new = answer.headers["location"].removeprefix("/jobs/")
    assert new != old
    row = await db.fetchrow("SELECT name, username, state, tags FROM api.jobs WHERE id = $1", new)
    assert row is not None
    assert dict(row) == {"name": "resnet", "username": "alice", "state": "PENDING", "tags": ["team:vision"]}
    assert (await alice.post(f"/jobs/{old}/resubmit", csrf=False)).status_code == 403
    assert await db.fetchval("SELECT count(*) FROM api.jobs") == 2
    audited = await db.fetch(
        "SELECT username, target, status FROM api.audit_log"
        " WHERE route = '/jobs/{job_id}/resubmit' ORDER BY id"
    )
    assert [tuple(r) for r in audited] == [("alice", new, 303), ("alice", old, 403)]


async def test_a_running_job_is_followed_live_and_a_finished_one_is_not(
    db: Database, portal: Browser
) -> None:
    job = await insert_job(db, user="root", state="RUNNING")
    page = await portal.get(f"/jobs/{job}")
    assert connected(page.text)
    assert f'hx-get="/jobs/{job}/panel" hx-trigger="sse:changed"' in page.text
    panel = await portal.get(f"/jobs/{job}/panel", headers={"HX-Request": "true"})
    assert panel.text.lstrip().startswith('<div id="job-live"')
    assert connected(panel.text)
    await db.execute("UPDATE api.jobs SET state = 'SUCCEEDED', finished_at = now() WHERE id = $1", job)
    panel = await portal.get(f"/jobs/{job}/panel", headers={"HX-Request": "true"})
    assert panel.text.lstrip().startswith('<div id="job-live"')
    assert "sse-connect" not in panel.text
    assert "sse:changed" not in panel.text
    page = await portal.get(f"/jobs/{job}")
    assert "sse-connect" not in page.text
    assert "no longer updates" in page.text


async def test_without_a_bus_the_timeline_is_what_the_database_knows(db: Database, portal: Browser) -> None:
    now = utcnow()
    job = await insert_job(
        db,
        user="root",
        state="FAILED",
        created=now - timedelta(minutes=10),
        finished=now - timedelta(minutes=1),
    )
    await insert_attempt(
        db,
        job,
        state="EXITED",
        started=now - timedelta(minutes=6),
        finished=now - timedelta(minutes=2),
        exit_code=3,
    )
    html = (await portal.get(f"/jobs/{job}")).text
    assert "From the database" in html
    entries = [
        " ".join(unescape(re.sub(r"<[^>]+>", "", li)).split()) for li in re.findall(r"<li>(.*?)</li>", html)
    ]
    kinds = [re.sub(r"^\S+ \S+ UTC ", "", e) for e in entries]
    assert kinds == [
        "job submitted by root to default",
        "task main-0 attempt 1 placed node node-a, GPUs [2, 3]",
        "task main-0 attempt 1 started node node-a",
        "task main-0 attempt 1 ended exit code 3",
        "job failed",
    ]


async def test_the_gpu_charts_plot_the_jobs_history(db: Database, portal: Browser) -> None:
    now = utcnow().replace(microsecond=0)
    job = await insert_job(db, user="root", state="RUNNING", gpus=2)
    await insert_attempt(db, job, started=now - timedelta(minutes=5))
    for seconds_ago, gpu, util, mem in ((60, 0, 50.0, 1024), (60, 1, 70.0, 3072), (50, 0, 90.0, 2048)):
        await db.execute(
            "INSERT INTO monitor.gpu_history (resolution_s, bucket, node_id, gpu_index, job_id, samples,"
            " utilization_avg, utilization_max, memory_used_mb_max)"
            " VALUES (10, $1, 'node-a', $2, $3, 1, $4, $4, $5)",
            now - timedelta(seconds=seconds_ago),
            gpu,
            job,
            util,
            mem,
        )
    html = (await portal.get(f"/jobs/{job}")).text
    charts = [json.loads(unescape(c)) for c in re.findall(r"data-chart='([^']*)'", html)]
    assert [c["title"] for c in charts] == ["GPU utilisation", "GPU memory used (all its GPUs)"]
    assert charts[0]["x"] == [
        (now - timedelta(seconds=60)).timestamp(),
        (now - timedelta(seconds=50)).timestamp(),
    ]
    assert charts[0]["series"] == [
        {"label": "mean", "values": [60.0, 90.0]},
        {"label": "highest", "values": [70.0, 90.0]},
    ]
    assert charts[1]["series"] == [{"label": "used", "values": [4.0, 2.0]}]


class FakeNode:
    """A node agent's answers to log requests, from a log held in memory: the one thing
    a test cannot have here is a node."""

    def __init__(self, log: bytes) -> None:
        self.log = log

    async def __call__(self, _subject: str, question: bytes) -> bytes:
        asked = LogRequest.model_validate_json(question)
        piece = self.log[asked.offset : asked.offset + asked.max_bytes]
        return LogChunk(exists=True, size=len(self.log), data=piece).model_dump_json().encode()


async def test_a_tasks_log_is_shown_escaped_and_says_when_no_node_can_be_asked(
    db: Database, portal: Browser, portal_app: object
) -> None:
    job = await insert_job(db, user="root", state="SUCCEEDED", finished=utcnow())
    await insert_attempt(db, job, state="EXITED", exit_code=0, started=utcnow(), finished=utcnow())
    page = await portal.get(f"/jobs/{job}")
    assert f'hx-get="/jobs/{job}/tasks/main-0/log?attempt=1"' in page.text
    without = await portal.get(f"/jobs/{job}/tasks/main-0/log?attempt=1", headers={"HX-Request": "true"})
    assert without.status_code == 200
    assert "no message bus to ask nodes for logs" in without.text
    portal_app.state.ask_node = FakeNode(b"epoch 1 <loss>=0.5\n")  # type: ignore[attr-defined]
    shown = await portal.get(f"/jobs/{job}/tasks/main-0/log?attempt=1", headers={"HX-Request": "true"})
    assert re.search(r'<pre class="log"[^>]*>epoch 1 &lt;loss&gt;=0.5\n</pre>', shown.text)
    assert "sse-connect" not in shown.text  # the attempt ended: nothing to follow
    assert (await portal.get(f"/jobs/{job}/tasks/main-9/log?attempt=1")).status_code == 404
    assert (await portal.get(f"/jobs/{job}/tasks/Main!/log?attempt=1")).status_code == 422


@pytest.mark.timeout(20)
async def test_a_running_tasks_log_is_followed_from_where_its_tail_ended(
    db: Database, portal: Browser, portal_app: object
) -> None:
    job = await insert_job(db, user="root", state="RUNNING")
    attempt = await insert_attempt(db, job, started=utcnow())
    node = FakeNode(b"line 1\n")
    portal_app.state.ask_node = node  # type: ignore[attr-defined]
    shown = await portal.get(f"/jobs/{job}/tasks/main-0/log?attempt=1", headers={"HX-Request": "true"})
    live = re.search(r'sse-connect="([^"]+)" sse-close="end"', shown.text)
    assert live is not None
    assert 'sse-swap="log" hx-swap="beforeend"' in shown.text
    node.log += b"<b>line 2</b>\r\nline 3\n"
    await db.execute("UPDATE launcher.attempts SET state = 'EXITED', exit_code = 0 WHERE id = $1", attempt)
    async with portal.http.stream("GET", unescape(live.group(1))) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        body = "".join([part async for part in stream.aiter_text()])
    messages = [m for m in body.split("\n\n") if m.startswith("event:")]
    assert messages == [
        "event: log\nid: 29\ndata: &lt;b&gt;line 2&lt;/b&gt;\ndata: line 3\ndata: ",
        "event: end\ndata: " + FOLLOWING_ENDED,
    ]


async def silent_node(_subject: str, _question: bytes) -> bytes:
    raise TimeoutError


@pytest.mark.timeout(20)
async def test_a_node_not_answering_is_said_in_the_log_panel_and_ends_its_stream(
    db: Database, portal: Browser, portal_app: object
) -> None:
    job = await insert_job(db, user="root", state="RUNNING")
    await insert_attempt(db, job, started=utcnow())
    app_state = portal_app.state  # type: ignore[attr-defined]
    app_state.ask_node = silent_node
    app_state.api_settings = app_state.api_settings.model_copy(update={"node_logs_timeout_s": 0.3})
    shown = await portal.get(f"/jobs/{job}/tasks/main-0/log?attempt=1", headers={"HX-Request": "true"})
    assert shown.status_code == 200
    assert re.search(
        r'class="notice error log-problem"[^>]*>node node-a is not answering: no agent of it', shown.text
    )
    assert "sse-connect" not in shown.text
    path = f"/jobs/{job}/tasks/main-0/log/live?attempt=1&offset=0"
    async with portal.http.stream("GET", path) as stream:
        body = "".join([part async for part in stream.aiter_text()])
    messages = [m for m in body.split("\n\n") if m.startswith("event:")]
    assert len(messages) == 2
    assert messages[0].startswith("event: log\ndata: \ndata: [corral] node node-a is not answering")
    assert messages[1] == "event: end\ndata: " + FOLLOWING_ENDED


def test_an_event_of_the_stream_is_a_line_of_the_timeline() -> None:
    tasks = {"att-1": "task main-0 attempt 1"}
    exited = {
        "type": "corral.task.exited.v1",
        "time": "2026-01-02T03:04:05Z",
        "data": {"attempt_id": "att-1", "job_id": "job-1", "node_id": "node-a", "exit_code": 3, "reason": ""},
    }
    assert timeline_entry(exited, tasks) == (
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "task exited",
        "task main-0 attempt 1, node node-a, exit code 3",
    )
    scheduled = {
        "type": "corral.job.scheduled.v1",
        "time": "2026-01-02T03:04:00Z",
        "data": {"job_id": "job-1", "placements": [{"node_id": "node-b"}, {"node_id": "node-a"}]},
    }
    assert timeline_entry(scheduled, tasks) == (
        datetime(2026, 1, 2, 3, 4, tzinfo=UTC),
        "job scheduled",
        "2 tasks on node-a, node-b",
    )
    clean = {
        "type": "corral.task.exited.v1",
        "time": "2026-01-02T03:04:05Z",
        "data": {
            "attempt_id": "att-1",
            "node_id": "node-a",
            "exit_code": 0,
            "classification": "unknown",
            "reason": "exited with code 0",
        },
    }
    assert timeline_entry(clean, tasks) == (
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "task exited",
        "task main-0 attempt 1, node node-a, exit code 0",
    )
    assert timeline_entry({"type": "corral.job.cancel_requested.v1", "data": {}}, tasks) is None
