"""Services in Chromium against a stack: a service created through the API appears on the
services page and becomes ready without a reload (its replicas' readiness probes pass);
its page lists each replica with its node and a link to the replica's job, whose page
links back."""

from __future__ import annotations

import sys

import pytest
from playwright.async_api import Page, expect

from tests.e2e.stack import Stack
from tests.portal.browser.browsing import mark_page, screenshot, still_same_page

pytestmark = pytest.mark.asyncio(loop_scope="package")

NAME = "hello-web"
# A replica: Python's own HTTP server on the role's http port; ready once it answers GET /.
SERVER = f"{sys.executable} -m http.server --bind 0.0.0.0 $CORRAL_PORT_HTTP"


async def test_a_new_service_becomes_ready_on_the_services_page_and_links_its_replicas(
    admin_tab: Page, stack: Stack
) -> None:
    page = admin_tab
    await page.goto("/services")
    await expect(page.get_by_role("link", name="Services")).to_have_attribute("aria-current", "page")
    await mark_page(page)

    spec = {
        "name": NAME,
        "kind": "service",
        "tasks": [{"name": "web", "command": SERVER, "ports": {"http": 1}, "resources": {"gpus": 0}}],
        "service": {"replicas": 2, "port": "http", "readiness": {"path": "/", "period_s": 0.5}},
    }
    async with stack.client() as http:
        created = await http.post("/api/v1/services", json=spec)
        assert created.status_code == 201, created.text
        try:
            row = page.locator(f'tr[data-service="{NAME}"]')
            await expect(row).to_contain_text("2/2", timeout=30_000)
            await expect(row.locator(".badge")).to_have_text("Ready")
            await expect(row).to_contain_text(f"/serve/{NAME}/")
            assert await still_same_page(page)  # it arrived by itself
            for _ in range(5):  # traffic through the gateway shows as requests per second
                called = await http.get(f"/serve/{NAME}/")
                assert called.status_code == 200, called.text
            await expect(row.locator("td.num").last).not_to_have_text("—", timeout=10_000)
            await screenshot(page, "services")
            await screenshot(page, "services", phone=True)

            await row.get_by_role("link", name=NAME).click()
            await expect(page.get_by_role("heading", level=1)).to_have_text(f"Service {NAME}")
            replicas = page.locator("table.replicas tbody tr")
            await expect(replicas).to_have_count(2)
            for index in range(2):
                await expect(replicas.nth(index)).to_contain_text("Ready")
                await expect(replicas.nth(index).locator('a[href^="/nodes/"]')).to_have_count(1)
            await screenshot(page, "service")
            job_link = replicas.first.locator('a[href^="/jobs/"]')
            job_id = await job_link.inner_text()
            await job_link.click()
            await page.wait_for_url(f"**/jobs/{job_id}")
            await expect(page.locator("dl.facts").first).to_contain_text(job_id)
            await expect(page.locator("dd.replica-of")).to_contain_text(f"{NAME}, a replica of revision 1")
            await page.locator("dd.replica-of a").click()  # and back to its service
            await page.wait_for_url(f"**/services/{NAME}")
        finally:
            # The stack is shared by every browser test: leave no service running.
            deleted = await http.delete(f"/api/v1/services/{NAME}")
            assert deleted.status_code in (200, 202, 204), deleted.text
