"""``/usage`` and ``/usage.csv``: GPU-hours held and used, by user, by VC and by day.

Determined's cluster usage shows what was allocated; this shows that and what was used
of it, because a GPU held at 5 % costs the cluster as much as one at 100 %. Held is
GPUs x time from placement to release, clipped to the window's UTC days; used is held
weighted by the job's mean GPU utilisation that day (``repository_usage.py``).

One query returns a row per day x user x VC; the page adds them up three ways, and the
CSV export is those rows, so the page and the export never disagree. The utilisation is
read from the monitor's per-job daily fold of its GPU history, so a 90-day window reads
a row per job and day, not every 5-minute reading. The window is whole
UTC days: ``?days=N`` (the last N, today included; default 7) or ``?since=&until=``
(dates, both included), at most ``MAX_DAYS``. A user sees their own usage only, as
``GET /api/v1/jobs`` shows them their own jobs; an admin sees everyone's, or one user's
with ``?user=``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response

from services.api.dependencies import Db
from services.api.portal.dependencies import SignedIn
from services.api.portal.errors import PortalRoute
from services.api.portal.rendering import render
from services.api.portal.repository_usage import UsageRepository, UsageRow
from shared.clock import utcnow
from shared.errors import InvalidInput
from shared.jobs import NAME_PATTERN

router = APIRouter(route_class=PortalRoute, include_in_schema=False)

MAX_DAYS = 90
DEFAULT_DAYS = 7
DATE = r"^\d{4}-\d{2}-\d{2}$"  # a day as YYYY-MM-DD (and nothing pydantic could read as one)


@dataclass(frozen=True)
class UsageQuery:
    """What a usage request asks for, checked: whole UTC days, both included."""

    first_day: date
    last_day: date
    user: str | None  # the one user whose usage is shown; None: everyone's (admins)
    asked_for_user: str | None  # the ?user= as given
    hidden: bool  # a user asked for someone else's usage: there is none they may see

    @property
    def days(self) -> list[date]:
        return [self.first_day + timedelta(days=n) for n in range((self.last_day - self.first_day).days + 1)]

    def query_string(self) -> str:
        """The same window as dates, for the CSV link and the form."""
        user = f"&user={self.asked_for_user}" if self.asked_for_user else ""
        return f"since={self.first_day.isoformat()}&until={self.last_day.isoformat()}{user}"


def _day(field: str, value: str | None) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"{field}: {value} is not a day of the calendar; write it as YYYY-MM-DD") from None


def usage_window(days: int | None, since: date | None, until: date | None, today: date) -> tuple[date, date]:
    """The first and last day asked for, or ``InvalidInput`` saying what to change."""
    if days is not None and (since is not None or until is not None):
        raise InvalidInput("give either days or since/until, not both")
    if since is None and until is None:
        span = days or DEFAULT_DAYS
        return today - timedelta(days=span - 1), today
    last = until or today
    first = since or last - timedelta(days=DEFAULT_DAYS - 1)
    if last > today:
        raise InvalidInput(
            f"until ({last}) is in the future; the last day with usage is today, {today} (UTC)"
        )
    if first > last:
        raise InvalidInput(f"since ({first}) is after until ({last}); swap them")
    span = (last - first).days + 1
    if span > MAX_DAYS:
        raise InvalidInput(
            f"the window is {span} days; at most {MAX_DAYS} are shown at once: move since or until closer"
        )
    return first, last


async def usage_query(
    user: SignedIn,
    days: Annotated[int | None, Query(ge=1, le=MAX_DAYS, description="the last N days")] = None,
    since: Annotated[str | None, Query(pattern=DATE, description="first day, e.g. 2026-05-01 (UTC)")] = None,
    until: Annotated[str | None, Query(pattern=DATE, description="last day, included")] = None,
    of_user: Annotated[str | None, Query(alias="user", pattern=NAME_PATTERN)] = None,
) -> UsageQuery:
    first, last = usage_window(days, _day("since", since), _day("until", until), utcnow().date())
    if user.is_admin:
        return UsageQuery(first, last, of_user, of_user, hidden=False)
    # As GET /api/v1/jobs: a user asking for someone else's gets nothing they may not see.
    hidden = of_user is not None and of_user != user.username
    return UsageQuery(first, last, user.username, of_user, hidden=hidden)


Asked = Annotated[UsageQuery, Depends(usage_query)]


@dataclass
class Totals:
    held: float = 0.0
    used: float = 0.0
    unmeasured: float = 0.0

    def add(self, row: UsageRow) -> None:
        self.held += row.gpu_hours_held
        self.used += row.gpu_hours_used
        self.unmeasured += row.gpu_hours_unmeasured

    @property
    def used_pct(self) -> float | None:
        """Used as a share of the held time that had readings."""
        measured = self.held - self.unmeasured
        return None if measured <= 1e-9 else 100 * self.used / measured


def totals_by(rows: Iterable[UsageRow], key: str, keys: Iterable[object] = ()) -> dict[object, Totals]:
    """Rows added up by one of their fields; ``keys`` listed first, with zeros if absent."""
    found: dict[object, Totals] = {k: Totals() for k in keys}
    for row in rows:
        found.setdefault(getattr(row, key), Totals()).add(row)
    return found


async def _rows(asked: UsageQuery, db: Db) -> list[UsageRow]:
    if asked.hidden:
        return []
    since = datetime.combine(asked.first_day, time(), UTC)
    until = datetime.combine(asked.last_day + timedelta(days=1), time(), UTC)
    return await UsageRepository(db).usage(since, until, asked.user)


@router.get("/usage", response_class=HTMLResponse)
async def usage_page(request: Request, user: SignedIn, asked: Asked, db: Db) -> HTMLResponse:
    rows = await _rows(asked, db)
    total = Totals()
    for row in rows:
        total.add(row)
    return render(
        request,
        "usage.html",
        user,
        section="usage",
        title="Usage",
        asked=asked,
        total=total,
        by_user=dict(sorted(totals_by(rows, "username").items(), key=lambda kv: -kv[1].held)),
        by_vc=dict(sorted(totals_by(rows, "virtual_cluster").items(), key=lambda kv: -kv[1].held)),
        by_day=totals_by(rows, "day", asked.days),
        presets=(1, 7, 30, MAX_DAYS),
        max_days=MAX_DAYS,
    )


CSV_COLUMNS = (
    "day",
    "user",
    "virtual_cluster",
    "gpu_hours_held",
    "gpu_hours_used",
    "gpu_hours_held_without_readings",
)


def usage_csv(rows: Iterable[UsageRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in rows:
        writer.writerow(
            [
                r.day.isoformat(),
                r.username,
                r.virtual_cluster,
                f"{r.gpu_hours_held:.3f}",
                f"{r.gpu_hours_used:.3f}",
                f"{r.gpu_hours_unmeasured:.3f}",
            ]
        )
    return out.getvalue()


@router.get("/usage.csv")
async def usage_export(asked: Asked, db: Db) -> Response:
    """One row per day x user x VC with GPU-hours held and used, as the page adds up."""
    name = f"corral-usage-{asked.first_day.isoformat()}-to-{asked.last_day.isoformat()}.csv"
    return Response(
        usage_csv(await _rows(asked, db)),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"},
    )
