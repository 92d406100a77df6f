"""The portal's pages and files are gzipped for a client that accepts it; the API's JSON
and every event stream are not."""

from __future__ import annotations

import httpx

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.api.portal.rendering import static_url
from shared.db.pool import Database
from shared.jobs import JobSpec
from tests.portal.conftest import Browser


async def test_pages_and_files_are_gzipped_and_api_answers_are_not(
    portal: Browser, portal_app: object, db: Database, admin_token: str
) -> None:
    spec = JobSpec.model_validate(
        {"name": "padding-" + "x" * 40, "tasks": [{"name": "main", "command": "true"}]}
    )
    for _ in range(30):
        await Submitter(JobRepository(db)).submit(spec, "root", None)
    page = await portal.get("/jobs", headers={"Accept-Encoding": "gzip"})
    assert page.status_code == 200
    assert page.headers["content-encoding"] == "gzip"
    assert int(page.headers["content-length"]) < len(page.content) / 3
    script = await portal.get(static_url("vendor/htmx-2.0.11.min.js"), headers={"Accept-Encoding": "gzip"})
    assert script.headers["content-encoding"] == "gzip"

    transport = httpx.ASGITransport(app=portal_app)  # type: ignore[arg-type]
    headers = {"Authorization": f"Bearer {admin_token}", "Accept-Encoding": "gzip"}
    async with httpx.AsyncClient(transport=transport, base_url="http://corral.test", headers=headers) as api:
        listed = await api.get("/api/v1/jobs?user=root&limit=30")
    assert listed.status_code == 200
    assert len(listed.content) > 4096
    assert "content-encoding" not in listed.headers
