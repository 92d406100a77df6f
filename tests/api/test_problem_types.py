"""Every problem type the API can answer with is documented, and its ``type`` leads there.

The registry is ``ProblemSlug`` (services/api/problems.py): ``problem()`` takes nothing
else, which mypy holds every direct answer to, and the errors raised as exceptions carry
their slug as ``problem_type``, which these tests hold to it. docs/problems.md has one
section per type, and the API serves each at the problem's ``type``, relative to the
request (``/docs/problems/<slug>``), without a token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import cast
from urllib.parse import urljoin

import httpx
import pytest

# The app imports every module the API answers from, and so every error class it raises.
from services.api.app import create_app
from services.api.docs_pages import PROBLEMS, problem_sections
from services.api.problems import PROBLEM_BASE, PROBLEM_MEDIA_TYPE, PROBLEM_TYPES
from services.api.settings import Settings
from shared.db.pool import Database
from shared.errors import CorralError
from shared.service import Health


@pytest.fixture
async def pages() -> AsyncIterator[httpx.AsyncClient]:
    """The API without a database: the pages need none, and no token."""
    app = create_app(cast(Database, None), Health("api", {}), Settings())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://corral.test") as http:
        yield http


def _error_classes() -> set[type[CorralError]]:
    found, pending = set(), [CorralError]
    while pending:
        cls = pending.pop()
        found.add(cls)
        pending += cls.__subclasses__()
    return found


def test_every_error_class_answers_a_registered_type() -> None:
    classes = _error_classes()
    assert len(classes) > 10, "the API's error classes were not found"
    unregistered = {c.__qualname__: c.problem_type for c in classes if c.problem_type not in PROBLEM_TYPES}
    assert not unregistered, f"types missing from ProblemSlug (services/api/problems.py): {unregistered}"


def test_every_registered_type_has_a_section_and_every_section_a_type() -> None:
    documented = set(problem_sections())
    assert documented == PROBLEM_TYPES, (
        f"in ProblemSlug but not in {PROBLEMS.name}: {sorted(PROBLEM_TYPES - documented)}; "
        f"in {PROBLEMS.name} but not in ProblemSlug: {sorted(documented - PROBLEM_TYPES)}"
    )
    for slug, section in problem_sections().items():
        assert "*What to do:*" in section, f"{slug}: say what to do"


async def test_every_type_resolves_to_its_section(pages: httpx.AsyncClient) -> None:
    for slug in sorted(PROBLEM_TYPES):
        page = await pages.get(PROBLEM_BASE + slug)
        assert page.status_code == 200, (slug, page.text)
        assert page.headers["content-type"].startswith("text/markdown")
        assert page.text.startswith(f"## {slug}\n")
        assert "## " not in page.text[3:], f"{slug}: only its own section"
    whole = await pages.get("/docs/problems")
    assert whole.text == PROBLEMS.read_text()


async def test_only_the_shipped_pages_are_served(pages: httpx.AsyncClient) -> None:
    unknown = await pages.get(PROBLEM_BASE + "no-such-problem")
    assert unknown.status_code == 404
    assert unknown.headers["content-type"] == PROBLEM_MEDIA_TYPE
    assert "not-found" in unknown.json()["detail"], "the 404 lists the types there are"
    for path in [
        "/docs/problems/..%2Fconfiguration",
        "/docs/problems/%2E%2E",
        "/docs/configuration.md",
        "/docs/runbooks/..%2F..%2FREADME",
        "/docs/problems.md",
    ]:
        assert (await pages.get(path)).status_code in (404, 422), path


async def test_a_problem_the_api_answers_leads_to_its_page(client: httpx.AsyncClient) -> None:
    refused = await client.get("/api/v1/jobs/job-nope")
    assert refused.status_code == 404
    problem = refused.json()
    assert problem["type"] == PROBLEM_BASE + "not-found"
    # RFC 9457: a relative type resolves against the request's URL.
    page = await client.get(urljoin(str(refused.url), problem["type"]), headers={"Authorization": ""})
    assert page.status_code == 200
    assert page.text.startswith("## not-found\n")
