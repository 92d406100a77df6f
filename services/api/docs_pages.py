"""``/docs/runbooks/{name}``: the shipped runbooks (docs/runbooks/*.md), as Markdown.

An alert's ``runbook_url`` points here unless a site says otherwise: the alerter makes a
rule's page name a link under ``CORRAL_ALERTER_RUNBOOK_BASE_URL``, whose default is this
route on the API's default address (``make up`` sets its own). The pages are for whoever
is paged, who may hold no token yet, so they are served without one, as ``/healthz`` is.

Only the runbooks directory is served, and only the pages that are there: a name is
looked up among the directory's own ``*.md`` files, never joined onto a path, so nothing
a request says (``..``, an absolute path, a link) reaches another file. The pages are
read from the source tree's ``docs/``; an installation without it (the container image)
answers 404, and such a site points the runbook links at pages it hosts itself.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter
from fastapi import Path as PathParam
from fastapi.responses import PlainTextResponse

from shared.errors import NotFound

RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "runbooks"
INDEX = "README"
MARKDOWN = "text/markdown; charset=utf-8"

# Not in the OpenAPI document: these are pages for people, not part of the API.
router = APIRouter(prefix="/docs", include_in_schema=False)


def runbook_pages(directory: Path = RUNBOOKS) -> dict[str, Path]:
    """The pages there are, by name (the file name without ``.md``)."""
    if not directory.is_dir():
        return {}
    return {path.stem: path for path in directory.glob("*.md") if path.is_file()}


async def _page(name: str) -> PlainTextResponse:
    pages = await asyncio.to_thread(runbook_pages)
    page = pages.get(name.removesuffix(".md"))
    if page is None:
        known = ", ".join(sorted(pages)) or "none here (no docs/runbooks in this installation)"
        raise NotFound(f"no runbook {name!r}; the runbooks are: {known}")
    return PlainTextResponse(await asyncio.to_thread(page.read_text), media_type=MARKDOWN)


@router.get("/runbooks")
@router.get("/runbooks/")
async def runbook_index() -> PlainTextResponse:
    """The runbooks' index: which page is for which alert, and what every alert has."""
    return await _page(INDEX)


@router.get("/runbooks/{name}")
async def runbook(
    name: Annotated[str, PathParam(max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")],
) -> PlainTextResponse:
    """One runbook, by its page name (``job-failed``, or ``job-failed.md`` as the pages
    link each other)."""
    return await _page(name)
