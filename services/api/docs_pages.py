"""``/docs/...``: the shipped pages the API's answers point at, as Markdown.

Two sets, and nothing else:

- ``/docs/runbooks/{name}``: the runbooks (docs/runbooks/*.md). An alert's ``runbook_url``
  points here unless a site says otherwise: the alerter makes a rule's page name a link
  under ``CORRAL_ALERTER_RUNBOOK_BASE_URL``, whose default is this route on the API's
  default address (``make up`` sets its own).
- ``/docs/problems/{slug}``: one section of docs/problems.md, what a problem type means
  and what to do. Every problem's ``type`` is this path, relative (``problems.py``), so
  it resolves against the API that answered; ``/docs/problems`` is the whole page.

The pages are for whoever is paged or refused, who may hold no token (yet), so they are
served without one, as ``/healthz`` is. A name is looked up among the directory's own
``*.md`` files (or the page's own sections), never joined onto a path, so nothing a
request says (``..``, an absolute path, a link) reaches another file. The pages are read
from the source tree's ``docs/`` or, in an installation without one (the container
image), from ``<prefix>/share/corral/docs``, where deploy/Dockerfile puts them.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter
from fastapi import Path as PathParam
from fastapi.responses import PlainTextResponse

from shared.errors import NotFound


def _docs_directory() -> Path:
    """The source tree's docs/ (a checkout, an editable install), else the installed copy."""
    source = Path(__file__).resolve().parents[2] / "docs"
    return source if source.is_dir() else Path(sys.prefix) / "share" / "corral" / "docs"


DOCS = _docs_directory()
RUNBOOKS = DOCS / "runbooks"
PROBLEMS = DOCS / "problems.md"
INDEX = "README"
MARKDOWN = "text/markdown; charset=utf-8"

_SECTION = re.compile(r"^## ([a-z0-9-]+)[ \t]*$", re.MULTILINE)
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"

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
    name: Annotated[str, PathParam(max_length=100, pattern=_NAME)],
) -> PlainTextResponse:
    """One runbook, by its page name (``job-failed``, or ``job-failed.md`` as the pages
    link each other)."""
    return await _page(name)


def problem_sections(page: Path = PROBLEMS) -> dict[str, str]:
    """The page's ``## <slug>`` sections by slug, each with its heading."""
    if not page.is_file():
        return {}
    text = page.read_text()
    starts = list(_SECTION.finditer(text))
    ends = [match.start() for match in starts[1:]] + [len(text)] * bool(starts)
    return {
        match.group(1): text[match.start() : end].rstrip() + "\n"
        for match, end in zip(starts, ends, strict=True)
    }


@router.get("/problems")
@router.get("/problems/")
async def problem_index() -> PlainTextResponse:
    """Every problem type the API answers with, one section each."""
    if not await asyncio.to_thread(PROBLEMS.is_file):
        raise NotFound("no docs/problems.md in this installation")
    return PlainTextResponse(await asyncio.to_thread(PROBLEMS.read_text), media_type=MARKDOWN)


@router.get("/problems/{slug}")
async def problem_type(slug: Annotated[str, PathParam(max_length=100, pattern=_NAME)]) -> PlainTextResponse:
    """What one problem type means and what to do, by its slug (a problem's ``type``)."""
    sections = await asyncio.to_thread(problem_sections)
    section = sections.get(slug)
    if section is None:
        known = ", ".join(sorted(sections)) or "none here (no docs/problems.md in this installation)"
        raise NotFound(f"no problem type {slug!r}; the types are: {known}")
    return PlainTextResponse(section, media_type=MARKDOWN)
