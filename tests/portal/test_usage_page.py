"""The usage page and its CSV export through the app on a real database: GPU-hours held
(allocations clipped to each UTC day of the window) and used (weighted by the job's mean
utilisation that day, as the monitor folds it) by user, VC and day, read from the cells;
the CSV parsed with ``csv`` and matching the page; a user's own usage only; broken
windows refused."""

from __future__ import annotations

import csv
import io
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, time, timedelta

import pytest

from services.monitor.repository import roll_up_job_usage
from shared.db.pool import Database
from tests.api.test_events_api import _job
from tests.portal.conftest import Browser
from tests.portal.test_home_page import history, tables_of

BrowserFor = Callable[[str, str], Awaitable[Browser]]


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), UTC)


async def _allocation(
    db: Database, user: str, vc: str, gpus: int, start: datetime, end: datetime | None
) -> str:
    job_id = await _job(db, user, vc)
    await db.execute(
        "UPDATE api.jobs SET state = $2, generation = 1 WHERE id = $1",
        job_id,
        "RUNNING" if end is None else "SUCCEEDED",
    )
    await db.execute(
        "INSERT INTO scheduler.allocations (job_id, generation, task_role, task_index, node_id, gpu_indices,"
        " created_at, released_at) VALUES ($1, 1, 'main', 0, 'n1', $2, $3, $4)",
        job_id,
        list(range(gpus)),
        start,
        end,
    )
    return job_id


class Seeded:
    """Alice: 2 GPUs from 20:00 two days ago to 04:00 yesterday (50 %, then 10 %), 1 GPU
    from 22:00 yesterday, still running (80 % yesterday, no readings today); 4 GPUs for a
    whole day ten days ago. Bob: 1 GPU 10:00 to 16:00 yesterday, no readings."""

    def __init__(self) -> None:
        self.today = datetime.now(UTC).date()
        self.yesterday = self.today - timedelta(days=1)
        self.before = self.today - timedelta(days=2)


@pytest.fixture
async def seeded(db: Database) -> Seeded:
    s = Seeded()
    y, b = _midnight(s.yesterday), _midnight(s.before)
    a = await _allocation(db, "alice", "vision", 2, b + timedelta(hours=20), y + timedelta(hours=4))
    await history(db, 300, "n1", [0, 1], a, b + timedelta(hours=20), 48, 50.0, 60.0, 30)
    await history(db, 300, "n1", [0], a, y, 48, 5.0, 9.0, 30)
    await history(db, 300, "n1", [1], a, y, 48, 15.0, 19.0, 30)
    await _allocation(db, "bob", "default", 1, y + timedelta(hours=10), y + timedelta(hours=16))
    d = await _allocation(db, "alice", "vision", 1, y + timedelta(hours=22), None)
    # Readings for its first hour only: folded even just after midnight (the monitor folds a
    # bucket a quarter of an hour after it ends); the day's mean is theirs.
    await history(db, 300, "n2", [0], d, y + timedelta(hours=22), 12, 80.0, 90.0, 30)
    ten_days_ago = _midnight(s.today - timedelta(days=10))
    await _allocation(db, "alice", "default", 4, ten_days_ago, ten_days_ago + timedelta(days=1))
    await db.execute("INSERT INTO api.virtual_clusters (name) VALUES ('vision')")
    async with db.transaction() as conn:  # the monitor's upkeep: each job's readings per day
        await roll_up_job_usage(conn, 300)
    return s


def _today_hours() -> float:
    now = datetime.now(UTC)
    return (now - _midnight(now.date())).total_seconds() / 3600


def _by_name(html: str, table: str) -> dict[str, list[str]]:
    return {row[0]: row[1:] for row in tables_of(html)[table]}


async def test_an_admin_sees_held_and_used_by_user_vc_and_day(seeded: Seeded, portal: Browser) -> None:
    before = _today_hours()
    page = await portal.get("/usage")
    after = _today_hours()
    assert page.status_code == 200, page.text
    html = page.text
    by_user = _by_name(html, "usage-by-user")
    # Bob: 6 GPU-hours held, none with readings.
    assert by_user["bob"] == ["6.00", "0.00", "—", "6.00"]
    alice = by_user["alice"]
    # Alice: 8 + 8 + 2 + today's held; used 8 x 50 % + 8 x 10 % + 2 x 80 % = 4 + 0.8 + 1.6.
    assert before + 18 - 0.01 <= float(alice[0]) <= after + 18 + 0.01
    assert alice[1] == "6.40"
    assert set(by_user) == {"alice", "bob"}

    by_vc = _by_name(html, "usage-by-vc")
    assert by_vc["default"] == ["6.00", "0.00", "—", "6.00"]
    assert by_vc["vision"][1] == "6.40"

    by_day = _by_name(html, "usage-by-day")
    assert len(by_day) == 7  # every day of the window, those without usage too
    assert by_day[str(seeded.before)] == ["8.00", "4.00", "50 %", "0.00"]
    # Yesterday: alice 8 (at a mean of 10 %) and 2 (at 80 %), bob 6 unmeasured.
    assert by_day[str(seeded.yesterday)] == ["16.00", "2.40", "24 %", "6.00"]
    assert by_day[str(seeded.today - timedelta(days=3))] == ["0.00", "0.00", "—", "0.00"]
    today = by_day[str(seeded.today)]
    assert before - 0.01 <= float(today[0]) <= after + 0.01
    assert today[1] == "0.00"
    assert today[3] == today[0]  # no readings yet today


async def test_the_csv_export_has_a_row_per_day_user_and_vc_matching_the_page(
    seeded: Seeded, portal: Browser
) -> None:
    query = f"since={seeded.before}&until={seeded.yesterday}"
    export = await portal.get(f"/usage.csv?{query}")
    assert export.status_code == 200
    assert export.headers["content-type"].startswith("text/csv")
    assert export.headers["content-disposition"] == (
        f'attachment; filename="corral-usage-{seeded.before}-to-{seeded.yesterday}.csv"'
    )
    rows = list(csv.DictReader(io.StringIO(export.text)))
    assert [
        (
            r["day"],
            r["user"],
            r["virtual_cluster"],
            r["gpu_hours_held"],
            r["gpu_hours_used"],
            r["gpu_hours_held_without_readings"],
        )
        for r in rows
    ] == [
        (str(seeded.before), "alice", "vision", "8.000", "4.000", "0.000"),
        (str(seeded.yesterday), "alice", "vision", "10.000", "2.400", "0.000"),
        (str(seeded.yesterday), "bob", "default", "6.000", "0.000", "6.000"),
    ]
    html = (await portal.get(f"/usage?{query}")).text
    assert f'href="/usage.csv?{query.replace("&", "&amp;")}"' in html
    for name, cells in _by_name(html, "usage-by-user").items():
        mine = [r for r in rows if r["user"] == name]
        assert cells[0] == f"{sum(float(r['gpu_hours_held']) for r in mine):.2f}"
        assert cells[1] == f"{sum(float(r['gpu_hours_used']) for r in mine):.2f}"
    for day, cells in _by_name(html, "usage-by-day").items():
        mine = [r for r in rows if r["day"] == day]
        assert cells[0] == f"{sum(float(r['gpu_hours_held']) for r in mine):.2f}"


async def test_the_window_clips_allocations_to_its_days(seeded: Seeded, portal: Browser) -> None:
    html = (await portal.get(f"/usage?since={seeded.yesterday}&until={seeded.yesterday}")).text
    assert _by_name(html, "usage-by-day") == {str(seeded.yesterday): ["16.00", "2.40", "24 %", "6.00"]}
    month = (await portal.get("/usage?days=30")).text
    ten_days_ago = str(seeded.today - timedelta(days=10))
    assert _by_name(month, "usage-by-day")[ten_days_ago] == ["96.00", "0.00", "—", "96.00"]
    assert _by_name(month, "usage-by-vc")["default"][0] == "102.00"
    one_user = (await portal.get("/usage?days=30&user=bob")).text
    assert list(_by_name(one_user, "usage-by-user")) == ["bob"]


async def test_a_user_sees_only_their_own_usage(seeded: Seeded, browser_for: BrowserFor) -> None:
    alice = await browser_for("alice", "user")
    query = f"since={seeded.before}&until={seeded.yesterday}"
    html = (await alice.get(f"/usage?{query}")).text
    assert list(_by_name(html, "usage-by-user")) == ["alice"]
    assert _by_name(html, "usage-by-day")[str(seeded.yesterday)] == ["10.00", "2.40", "24 %", "0.00"]
    assert 'name="user"' not in html  # no user filter for a user
    rows = list(csv.DictReader(io.StringIO((await alice.get(f"/usage.csv?{query}")).text)))
    assert {r["user"] for r in rows} == {"alice"}
    # Asking for someone else's shows none, as the API's job list does.
    others = await alice.get(f"/usage?{query}&user=bob")
    assert others.status_code == 200
    assert "Only admins see other users" in others.text
    assert "usage-by-user" not in others.text
    assert list(csv.DictReader(io.StringIO((await alice.get(f"/usage.csv?{query}&user=bob")).text))) == []


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("days=0", "days"),
        ("days=91", "days"),
        ("days=week", "days"),
        ("since=2026-02-30", "is not a day of the calendar"),
        ("since=yesterday", "since"),
        ("user=Bad!", "user"),
        ("days=7&since=2026-01-01", "either days or since/until, not both"),
    ],
)
async def test_a_broken_window_is_a_422_page_that_says_what_to_change(
    portal: Browser, query: str, says: str
) -> None:
    for path in ("/usage", "/usage.csv"):
        response = await portal.get(f"{path}?{query}")
        assert response.status_code == 422, (path, query)
        assert says in response.text
        assert "text/html" in response.headers["content-type"]


async def test_a_window_backwards_too_long_or_in_the_future_is_refused(portal: Browser) -> None:
    today = datetime.now(UTC).date()
    backwards = await portal.get(f"/usage?since={today}&until={today - timedelta(days=1)}")
    assert backwards.status_code == 422
    assert "swap them" in backwards.text
    too_long = await portal.get(f"/usage?since={today - timedelta(days=90)}&until={today}")
    assert too_long.status_code == 422
    assert "the window is 91 days; at most 90" in too_long.text
    assert (await portal.get(f"/usage?since={today - timedelta(days=89)}&until={today}")).status_code == 200
    future = await portal.get(f"/usage?until={today + timedelta(days=1)}")
    assert future.status_code == 422
    assert "is in the future" in future.text
