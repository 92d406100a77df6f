"""``/jobs``: the job list, filtered and paged on the server, live.

The filters are a GET form, so the whole view is its URL: it can be bookmarked, shared,
and re-fetched as it is by the live panel (``/jobs/table?<the same query>``). They are
checked with the API's own patterns (``JobState``, ``NAME_PATTERN``); a wrong one is a
422 page naming it. Who may see what follows ``GET /api/v1/jobs``: a user sees their own
jobs only, and asking for someone else's gives an empty list (said so on the page), never
theirs; an admin sees their own by default and may pick anyone's or everyone's.

Pages are a keyset on (created_at, id), newest first, with the API's cursor
(``jobs/pages.py``): "Older" starts right after the last row shown, so jobs submitted
meanwhile neither repeat nor shift a page; "Newer" goes back to the page whose last row
is the one just newer than this page's first. Only the first page follows the cluster live:
a page further back is a fixed window of older jobs and stays as it was loaded.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field, field_validator

from services.api.cluster.dependencies import ClusterRepo
from services.api.dependencies import Db
from services.api.jobs.pages import JobCursor
from services.api.jobs.repository import JobRepository, JobRow
from services.api.portal.dependencies import SignedIn
from services.api.portal.errors import PortalRoute
from services.api.portal.rendering import render
from services.api.portal.repository_jobs import JobListRow, JobPagesRepository
from services.api.portal.session import PortalUser
from shared.errors import NotFound
from shared.jobs import NAME_PATTERN, JobState

router = APIRouter(route_class=PortalRoute, include_in_schema=False)

PAGE_SIZE = 50
EVERYONE = "*"
MAX_TEXT = 64


async def job_pages(db: Db) -> JobPagesRepository:
    return JobPagesRepository(db)


JobPages = Annotated[JobPagesRepository, Depends(job_pages)]


class JobFilters(BaseModel):
    """The list's query string. An empty field of the form means "any"."""

    state: list[JobState] = Field(default=[], max_length=len(JobState))
    virtual_cluster: str | None = Field(default=None, pattern=NAME_PATTERN)
    user: str | None = Field(
        default=None,
        pattern=NAME_PATTERN.replace("^", "^(\\*|", 1).replace("$", ")$"),
        description="a username, or * for everyone (admins); default: the signed-in user",
    )
    text: str | None = Field(default=None, max_length=MAX_TEXT, description="part of the name or id")
    cursor: str | None = Field(default=None, max_length=200, pattern=r"^[A-Za-z0-9_=-]+$")

    @field_validator("virtual_cluster", "user", "text", "cursor", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        return value.strip() if isinstance(value, str) else value

    def href(self, path: str, **changes: str | None) -> str:
        """``path`` showing this view, with ``changes`` applied (None drops a parameter)."""
        pairs: list[tuple[str, str]] = [("state", s.value) for s in self.state]
        values: dict[str, str | None] = {
            "virtual_cluster": self.virtual_cluster,
            "user": self.user,
            "text": self.text,
            "cursor": self.cursor,
        }
        values.update(changes)
        pairs += [(key, value) for key, value in values.items() if value]
        return f"{path}?{urlencode(pairs)}" if pairs else path


Filters = Annotated[JobFilters, Query()]


def like_pattern(text: str) -> str:
    """An ILIKE pattern matching ``text`` anywhere, its wildcards taken literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def _table_context(user: PortalUser, filters: JobFilters, pages: JobPagesRepository) -> dict[str, Any]:
    asked = filters.user or user.username
    # As GET /api/v1/jobs: a user's list is theirs whatever they ask for.
    owner = (None if asked == EVERYONE else asked) if user.is_admin else user.username
    refused = asked != owner and not (user.is_admin and asked == EVERYONE)
    rows: list[JobListRow] = []
    more = False
    newer: str | None = None
    if not refused:
        after = JobCursor.parse(filters.cursor) if filters.cursor else None
        states = [s.value for s in filters.state] or None
        like = like_pattern(filters.text) if filters.text else None
        key = (after.created_at, after.job_id) if after else None
        rows = await pages.jobs_page(states, filters.virtual_cluster, owner, like, key, PAGE_SIZE + 1)
        more = len(rows) > PAGE_SIZE
        rows = rows[:PAGE_SIZE]
        if key is not None:
            # The page before this one ends with the cursor's job: it starts after the job
            # PAGE_SIZE newer than that, or is the first page when there are fewer.
            keys = await pages.newer_keys(states, filters.virtual_cluster, owner, like, key, PAGE_SIZE + 1)
            if len(keys) > PAGE_SIZE:
                newer = JobCursor(*keys[PAGE_SIZE]).encode()
    older = JobCursor(rows[-1].created_at, rows[-1].id).encode() if more else None
    return {
        "rows": rows,
        "filters": filters,
        "asked_user": asked,
        "refused_user": asked if refused else None,
        "first_page": filters.cursor is None,
        "older_href": filters.href("/jobs", cursor=older) if older else None,
        "newer_href": filters.href("/jobs", cursor=newer),
        "first_href": filters.href("/jobs", cursor=None),
        "table_href": filters.href("/jobs/table"),
    }


async def visible_job(repo: JobRepository, job_id: str, user: PortalUser) -> JobRow:
    """The job if this user may see it (theirs, or any for an admin); else "not found",
    so that someone else's job does not show it exists."""
    job = await repo.get_job(job_id)
    if job is None or not (user.is_admin or job.username == user.username):
        raise NotFound(f"no job with id {job_id!r}; your jobs are listed at /jobs")
    return job


@router.get("/jobs", response_class=HTMLResponse)
async def jobs(
    request: Request, user: SignedIn, filters: Filters, pages: JobPages, cluster: ClusterRepo
) -> HTMLResponse:
    context = await _table_context(user, filters, pages)
    # The VCs this user may use, offered as the VC field's suggestions.
    vcs = [vc.name for vc in await cluster.list_vcs(None, user.principal.vc_user)]
    return render(
        request,
        "jobs.html",
        user,
        section="jobs",
        title="Jobs",
        states=list(JobState),
        vc_names=vcs,
        **context,
    )


@router.get("/jobs/table", response_class=HTMLResponse)
async def jobs_table(request: Request, user: SignedIn, filters: Filters, pages: JobPages) -> HTMLResponse:
    """The table alone: what the live first page fetches when jobs change."""
    context = await _table_context(user, filters, pages)
    return render(request, "fragments/jobs_table.html", user, **context)
