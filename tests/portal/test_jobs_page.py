"""The job list (``/jobs``): filters kept in the URL, keyset pages, who sees what, wait and
run times, and the live first page. Jobs are written straight into Postgres with the
times a test needs, as the API, scheduler and launcher would leave them."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from html import unescape
from html.parser import HTMLParser

from shared.clock import utcnow
from shared.db.pool import Database
from shared.ids import new_job_id
from tests.portal.conftest import Browser

SignIn = Callable[[str, str], Awaitable[Browser]]


def spec(name: str = "train", instances: int = 1, gpus: int = 1) -> dict[str, object]:
    return {
        "name": name,
        "tasks": [
            {
                "name": "main",
                "instances": instances,
                "command": "python train.py",
                "image": "pytorch/pytorch:2.4.0",
                "resources": {"gpus": gpus},
            }
        ],
    }


async def insert_job(
    db: Database,
    *,
    user: str = "alice",
    name: str = "train",
    state: str = "PENDING",
    vc: str = "default",
    created: datetime | None = None,
    finished: datetime | None = None,
    instances: int = 1,
    gpus: int = 1,
) -> str:
    """A job row as the API stores it (and as the launcher leaves it: ``state``, ``finished``)."""
    job_id = new_job_id()
    await db.execute(
        "INSERT INTO api.jobs (id, name, username, virtual_cluster, spec, total_gpus, state, created_at,"
        " finished_at) VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8, now()), $9)",
        job_id,
        name,
        user,
        vc,
        spec(name, instances, gpus),
        instances * gpus,
        state,
        created,
        finished,
    )
    return job_id


async def insert_attempt(
    db: Database,
    job_id: str,
    *,
    state: str = "RUNNING",
    started: datetime | None = None,
    finished: datetime | None = None,
    task_index: int = 0,
    attempt_no: int = 1,
    node: str = "node-a",
    exit_code: int | None = None,
    classification: str | None = None,
    reason: str = "",
) -> str:
    """An attempt as the launcher leaves it; attempt n belongs to the job's generation n - 1."""
    attempt_id = f"att-{job_id}-{task_index}-{attempt_no}"
    await db.execute(
        "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no, node_id,"
        " gpu_indices, state, started_at, finished_at, exit_code, classification, reason, log_path, ports,"
        " created_at)"
        " VALUES ($1, $2, $4 - 1, 'main', $3, $4, $5, '{2,3}', $6, $7, $8, $9, $10, $11,"
        " '/var/log/corral/a.log', '{\"master\": [29500]}', coalesce($7, now()))",
        attempt_id,
        job_id,
        task_index,
        attempt_no,
        node,
        state,
        started,
        finished,
        exit_code,
        classification,
        reason,
    )
    return attempt_id


class JobTable(HTMLParser):
    """The rows of the job table: each ``<tr data-job>``'s cells as text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr" and dict(attrs).get("data-job"):
            self.rows.append([])
        elif tag == "td" and self.rows and self._cell is None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr":
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


COLUMNS = ("id", "name", "state", "vc", "user", "gpus", "submitted", "wait", "runtime")


def rows_of(html: str) -> list[dict[str, str]]:
    parser = JobTable()
    parser.feed(html)
    return [dict(zip(COLUMNS, row, strict=True)) for row in parser.rows]


def ids_of(html: str) -> list[str]:
    return [row["id"] for row in rows_of(html)]


def older_link(html: str) -> str | None:
    found = re.search(r'<a href="(/jobs[^"]*)" rel="next">Older', html)
    return unescape(found.group(1)) if found else None


def newer_link(html: str) -> str | None:
    found = re.search(r'<a href="(/jobs[^"]*)" rel="prev">', html)
    return unescape(found.group(1)) if found else None


async def test_a_user_sees_only_their_own_jobs_and_is_told_when_asking_for_anothers(
    db: Database, browser_for: SignIn
) -> None:
    mine = await insert_job(db, user="alice")
    theirs = await insert_job(db, user="bob")
    alice = await browser_for("alice", "user")
    page = await alice.get("/jobs")
    assert page.status_code == 200
    assert ids_of(page.text) == [mine]
    asked = await alice.get("/jobs?user=bob")
    assert asked.status_code == 200
    assert ids_of(asked.text) == []
    assert "only your own jobs" in asked.text
    assert theirs not in asked.text
    everyone = await alice.get("/jobs?user=*")
    assert ids_of(everyone.text) == []
    assert "so no one else's are listed" in everyone.text


async def test_an_admin_sees_their_own_by_default_and_anyones_on_request(
    db: Database, portal: Browser
) -> None:
    root = await insert_job(db, user="root")
    alice = await insert_job(db, user="alice")
    assert ids_of((await portal.get("/jobs")).text) == [root]
    assert ids_of((await portal.get("/jobs?user=alice")).text) == [alice]
    assert set(ids_of((await portal.get("/jobs?user=*")).text)) == {root, alice}


async def test_each_filter_and_their_combination_narrow_the_list(db: Database, portal: Browser) -> None:
    start = utcnow() - timedelta(hours=1)
    at = [start + timedelta(minutes=i) for i in range(6)]
    a = await insert_job(db, user="root", name="resnet-a", state="RUNNING", vc="vision", created=at[0])
    b = await insert_job(db, user="root", name="resnet-b", state="PENDING", vc="default", created=at[1])
    c = await insert_job(db, user="root", name="bert", state="FAILED", vc="vision", created=at[2])
    d = await insert_job(db, user="root", name="bert_50", state="SUCCEEDED", vc="default", created=at[3])
    e = await insert_job(db, user="alice", name="resnet-c", state="RUNNING", vc="vision", created=at[4])

    async def listed(query: str) -> list[str]:
        page = await portal.get(f"/jobs?{query}")
        assert page.status_code == 200, page.text
        return ids_of(page.text)

    assert await listed("") == [d, c, b, a]
    assert await listed("state=RUNNING") == [a]
    assert await listed("state=RUNNING&state=FAILED") == [c, a]
    assert await listed("virtual_cluster=vision") == [c, a]
    assert await listed("text=resnet") == [b, a]
    assert await listed("text=RESNET-B") == [b]
    assert await listed(f"text={a[-10:]}") == [a]  # part of the id
    # The text is matched literally: "_" is not a wildcard.
    assert await listed("text=bert_") == [d]
    assert await listed("text=%25") == []
    assert await listed("state=RUNNING&state=FAILED&virtual_cluster=vision&text=bert") == [c]
    assert await listed("user=*&virtual_cluster=vision&state=RUNNING") == [e, a]
    assert await listed("user=alice&text=resnet") == [e]
    # Empty fields of the GET form mean "any".
    assert await listed("text=&virtual_cluster=&user=") == [d, c, b, a]


async def test_the_form_shows_the_filters_of_the_url(db: Database, portal: Browser) -> None:
    page = await portal.get("/jobs?state=FAILED&state=PENDING&virtual_cluster=vision&text=bert&user=*")
    html = page.text
    assert re.search(r'value="FAILED"\s+checked', html)
    assert re.search(r'value="PENDING"\s+checked', html)
    assert not re.search(r'value="RUNNING"\s+checked', html)
    assert 'name="text" value="bert"' in html
    assert 'name="virtual_cluster" value="vision"' in html
    assert re.findall(r'<datalist id="vc-names">(.*?)</datalist>', html) == ['<option value="default">']
    assert re.search(r'<option value="\*" selected>everyone', html)
    # The live table re-fetches exactly this view.
    found = re.search(r'hx-get="(/jobs/table\?[^"]*)"', html)
    assert found is not None
    assert unescape(found.group(1)) == (
        "/jobs/table?state=FAILED&state=PENDING&virtual_cluster=vision&user=%2A&text=bert"
    )


async def test_pages_hold_every_job_once_newest_first_whatever_is_submitted_meanwhile(
    db: Database, portal: Browser
) -> None:
    start = utcnow() - timedelta(days=1)
    # Pairs share a submit time, so the id breaks ties as the index does.
    created = [
        await insert_job(db, user="root", created=start + timedelta(seconds=i // 2)) for i in range(120)
    ]
    expected = sorted(created, key=lambda j: (created.index(j) // 2, j), reverse=True)
    pages: list[list[str]] = []
    path: str | None = "/jobs"
    while path is not None:
        page = await portal.get(path)
        assert page.status_code == 200
        pages.append(ids_of(page.text))
        if len(pages) == 1:
            # A job submitted between pages is newer than all: it shifts nothing.
            newest = await insert_job(db, user="root")
            assert 'sse-connect="/live/jobs?after=' in page.text
            assert newer_link(page.text) is None
        else:
            assert "sse-connect" not in page.text
            assert "does not update" in page.text
        path = older_link(page.text)
    assert [len(ids) for ids in pages] == [50, 50, 20]
    assert [job for ids in pages for job in ids] == expected
    # And back: "Newer" gives each page again, then the first page as it is now.
    path = newer_link(page.text)
    for ids in reversed(pages[:-1]):
        assert path is not None
        page = await portal.get(path)
        assert ids_of(page.text) == ids
        path = newer_link(page.text)
    assert path == "/jobs"
    assert ids_of((await portal.get(path)).text)[:2] == [newest, pages[0][0]]


async def test_a_broken_filter_or_cursor_is_a_422_page_that_says_what_is_wrong(portal: Browser) -> None:
    for query, field in (
        ("state=DONE", "state"),
        ("virtual_cluster=Not%20A%20Name", "virtual_cluster"),
        ("user=a%20b", "user"),
        ("text=" + "x" * 65, "text"),
        ("cursor=%3Cscript%3E", "cursor"),
    ):
        page = await portal.get(f"/jobs?{query}")
        assert page.status_code == 422, query
        assert "text/html" in page.headers["content-type"]
        assert f"<code>query.{field}" in page.text, (query, page.text)
    forged = await portal.get("/jobs?cursor=bm90LWEtY3Vyc29y")
    assert forged.status_code == 422
    assert "cursor is not one this API handed out" in forged.text
    table = await portal.get("/jobs/table?state=DONE", headers={"HX-Request": "true"})
    assert table.status_code == 422
    assert 'class="notice error"' in table.text


async def test_wait_and_run_times_are_shown(db: Database, portal: Browser) -> None:
    now = utcnow()
    waiting = await insert_job(db, user="root", created=now - timedelta(minutes=3))
    ran = await insert_job(
        db,
        user="root",
        state="SUCCEEDED",
        created=now - timedelta(minutes=30),
        finished=now - timedelta(minutes=5),
    )
    await insert_attempt(
        db,
        ran,
        state="EXITED",
        started=now - timedelta(minutes=20),
        finished=now - timedelta(minutes=5),
        exit_code=0,
    )
    running = await insert_job(db, user="root", state="RUNNING", created=now - timedelta(hours=3))
    await insert_attempt(db, running, started=now - timedelta(hours=2, minutes=30))
    rows = {row["id"]: row for row in rows_of((await portal.get("/jobs")).text)}
    assert (rows[waiting]["wait"], rows[waiting]["runtime"]) == ("3 min", "—")
    assert (rows[ran]["wait"], rows[ran]["runtime"]) == ("10 min", "15 min")
    assert (rows[running]["wait"], rows[running]["runtime"]) == ("30 min", "2 h 30 min")
    assert rows[running]["state"] == "RUNNING"
    assert rows[running]["gpus"] == "1"
    assert rows[running]["submitted"] == "3 h ago"


async def test_the_live_table_renders_the_same_rows_alone(db: Database, portal: Browser) -> None:
    job = await insert_job(db, user="root", state="FAILED")
    await insert_job(db, user="root", state="RUNNING")
    table = await portal.get("/jobs/table?state=FAILED", headers={"HX-Request": "true"})
    assert table.status_code == 200
    assert table.text.lstrip().startswith('<section class="card jobs-table" id="jobs-table"')
    assert "<html" not in table.text
    assert ids_of(table.text) == [job]
    assert 'hx-trigger="sse:changed"' in table.text
