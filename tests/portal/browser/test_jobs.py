"""Jobs in Chromium against a stack: a job submitted from the CLI shows up and finishes on
the jobs page without a reload, its log grows while it runs, and a second tenant sees
none of the first one's jobs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from tests.e2e.stack import Stack, corral
from tests.portal.browser.browsing import DESKTOP, mark_page, screenshot, sign_in, still_same_page, table_rows

pytestmark = pytest.mark.asyncio(loop_scope="package")

# Prints a numbered line every 0.4 s for about 8 s: long enough to watch it grow.
TALKER = "for i in $(seq 1 20); do echo line-$i; sleep 0.4; done"


async def _submit(stack: Stack, tmp_path: Path, command: str, name: str, *token: str) -> str:
    """A job submitted with ``corral submit``, as a user would; its id."""
    spec = tmp_path / f"{name}.json"
    spec.write_text(
        json.dumps({"name": name, "tasks": [{"name": "main", "command": command, "resources": {"gpus": 1}}]})
    )
    done = await asyncio.to_thread(corral, stack, *token, "submit", str(spec), "--json")
    assert done.returncode == 0, done.stderr
    job_id: str = json.loads(done.stdout)["id"]
    return job_id


async def _state_of(page: Page, job_id: str) -> str:
    return await page.locator(f'tr[data-job="{job_id}"] .badge').inner_text()


async def test_a_job_from_the_cli_finishes_on_the_jobs_page_without_a_reload(
    admin_tab: Page, stack: Stack, tmp_path: Path
) -> None:
    page = admin_tab
    await page.goto("/jobs")
    await mark_page(page)
    job_id = await _submit(stack, tmp_path, "sleep 1; echo done", "from-the-cli")

    row = page.locator(f'tr[data-job="{job_id}"]')
    await expect(row).to_be_visible()  # arrived by itself
    seen = {await _state_of(page, job_id)}
    for _ in range(300):
        state = await _state_of(page, job_id)
        seen.add(state)
        if state == "SUCCEEDED":
            break
        await asyncio.sleep(0.1)
    assert await _state_of(page, job_id) == "SUCCEEDED", seen
    assert len(seen) > 1, seen  # it was seen on its way, not only at its end
    assert await still_same_page(page)  # the table swapped in place: no navigation
    (first,) = [row for row in await table_rows(page) if row[0] == job_id]
    assert first[1:3] == ["from-the-cli", "SUCCEEDED"]
    await screenshot(page, "jobs")
    await screenshot(page, "jobs", phone=True)


async def test_a_running_job_log_grows_on_its_page(admin_tab: Page, stack: Stack, tmp_path: Path) -> None:
    page = admin_tab
    job_id = await _submit(stack, tmp_path, TALKER, "talker")
    await page.goto(f"/jobs/{job_id}")
    await mark_page(page)
    # The page follows the job: RUNNING arrives by itself, and with it the log.
    await expect(page.locator("#job-state")).to_have_text("RUNNING", timeout=20_000)
    log = page.locator("pre.log").first
    await expect(log).to_contain_text("line-1", timeout=10_000)
    partial = await log.inner_text()
    assert "line-20" not in partial, partial  # caught while it runs
    await expect(log).to_contain_text("line-20", timeout=20_000)
    lines = [line for line in (await log.inner_text()).splitlines() if line.startswith("line-")]
    assert lines == [f"line-{i}" for i in range(1, 21)], lines  # in order, none twice
    await expect(page.locator("#job-state")).to_have_text("SUCCEEDED", timeout=20_000)
    assert await still_same_page(page)
    await screenshot(page, "job")
    await screenshot(page, "job", phone=True)


async def test_a_second_tenant_sees_none_of_the_first_ones_jobs(
    chromium: Browser, admin_tab: Page, stack: Stack, tmp_path: Path
) -> None:
    admins = await _submit(stack, tmp_path, "true", "admins-own")
    made = await asyncio.to_thread(corral, stack, "user", "create", "tenant2")
    assert made.returncode == 0, made.stderr
    token = await asyncio.to_thread(corral, stack, "token", "create", "portal", "--user", "tenant2", "--json")
    assert token.returncode == 0, token.stderr
    tenant_token = json.loads(token.stdout)["token"]
    theirs = await _submit(stack, tmp_path, "true", "tenant2s-own", "--token", tenant_token)

    context = await chromium.new_context(base_url=stack.base_url, viewport=DESKTOP)
    try:
        page = await context.new_page()
        await sign_in(page, tenant_token, then="/jobs")
        await expect(page.locator(f'tr[data-job="{theirs}"]')).to_be_visible()
        listed = [row[0] for row in await table_rows(page)]
        assert listed == [theirs], listed
        # Asking for someone else's list or everyone's shows none of theirs, and says why.
        for query in ("?user=admin", "?user=*"):
            await page.goto(f"/jobs{query}")
            listed = [row[0] for row in await table_rows(page)]
            assert admins not in listed, listed
            assert listed in ([theirs], ["No jobs match."]), listed
            if listed != [theirs]:
                await expect(page.get_by_role("alert")).to_contain_text("only your own jobs")
        response = await page.goto(f"/jobs/{admins}")
        assert response is not None
        assert response.status == 404  # not "forbidden": its existence does not leak
        await expect(page.get_by_role("heading", level=1)).to_contain_text("Not found")
        assert "admins-own" not in await page.content()
    finally:
        await context.close()
    # The admin sees both.
    await admin_tab.goto("/jobs?user=*")
    everyone = {row[0] for row in await table_rows(admin_tab)}
    assert {admins, theirs} <= everyone
