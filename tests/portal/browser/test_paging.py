"""Paging through 10,000 jobs in Chromium by following the jobs page's "Older" links to
the last page: newest first, every job once, none skipped.

The first pages are clicked through as a person would; the rest are followed through the
same browser session's requests (its cookie, the links each page hands out) without
painting 190 more pages, which would cost a minute of the suite and show nothing more.
"""

from __future__ import annotations

import html
import re
import statistics
import time

import asyncpg
import pytest
from playwright.async_api import Page

from bench.portal_seed import seed_jobs
from tests.e2e.stack import Stack
from tests.portal.browser.browsing import screenshot, table_rows

pytestmark = pytest.mark.asyncio(loop_scope="package")

JOBS = 10_000
PAGE_SIZE = 50
CLICKED_PAGES = 10
_ROW = re.compile(r'<tr data-job="(job-[^"]+)"')
_OLDER = re.compile(r'<a href="([^"]+)" rel="next">')


@pytest.mark.timeout(300)
async def test_following_older_links_walks_all_10000_jobs_newest_first(admin_tab: Page, stack: Stack) -> None:
    conn = await asyncpg.connect(stack.env["CORRAL_DATABASE_URL"])
    try:
        # Finished jobs only: the running scheduler leaves them be.
        await seed_jobs(
            conn, JOBS, users=("admin",), prefix="job-page", states=("SUCCEEDED", "FAILED", "CANCELLED")
        )
        expected = [
            r["id"]
            for r in await conn.fetch(
                "SELECT id FROM api.jobs WHERE username = 'admin' ORDER BY created_at DESC, id DESC"
            )
        ]
    finally:
        await conn.close()
    # The admin's jobs from the other browser tests (the page lists one's own) come too.
    assert len(expected) >= JOBS

    page = admin_tab
    await page.goto("/jobs")
    seen: list[str] = []
    took_ms: list[float] = []
    pages = 0
    while True:
        pages += 1
        rows = [row[0] for row in await table_rows(page) if row[0].startswith("job-")]
        older = page.get_by_role("link", name="Older »")
        has_older = await older.count() > 0
        assert len(rows) == PAGE_SIZE or not has_older, (pages, len(rows))  # only the last is short
        seen += rows
        if not has_older or pages == CLICKED_PAGES:
            break
        if pages == 2:
            await screenshot(page, "jobs-older-page")
        started = time.perf_counter()
        await older.click()
        await page.wait_for_load_state("load")
        took_ms.append((time.perf_counter() - started) * 1000)
    href = await page.get_by_role("link", name="Older »").get_attribute("href")
    while href is not None:
        pages += 1
        answer = await page.context.request.get(html.unescape(href))
        assert answer.ok, answer.status
        text = await answer.text()
        rows = _ROW.findall(text)
        older_link = _OLDER.search(text)
        assert len(rows) == PAGE_SIZE or older_link is None, (pages, len(rows))
        seen += rows
        href = older_link.group(1) if older_link else None
        assert pages <= len(expected) // PAGE_SIZE + 1, "more pages than there are jobs"
    assert len(seen) == len(set(seen)), "a job listed twice"
    assert seen == expected  # all of them, newest first, in the same order as the database
    full_pages = -(-len(expected) // PAGE_SIZE)
    assert pages in (full_pages, full_pages + 1)  # (+1: an empty last page after a full one)
    # For the record (not a verdict: the benchmark measures the page's own time).
    print(
        f"{pages} pages; the first {CLICKED_PAGES} clicked: median {statistics.median(took_ms):.0f} ms"
        f" per click, slowest {max(took_ms):.0f} ms"
    )
