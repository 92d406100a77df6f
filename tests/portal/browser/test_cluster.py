"""The cluster in Chromium against a stack: a simulated GPU that reports an Xid turns red
on the nodes page without a reload, its alert appears on the alerts page by itself and is
acknowledged there; the node's own page, the VCs, home and usage pages are rendered."""

from __future__ import annotations

import asyncio

import pytest
from playwright.async_api import Locator, Page, expect

from tests.e2e.stack import Stack, corral
from tests.portal.browser.browsing import mark_page, screenshot, still_same_page

pytestmark = pytest.mark.asyncio(loop_scope="package")

BROKEN_GPU = 3


async def _acknowledge(page: Page, row: Locator, note: str) -> None:
    """Open the row's form, type a note, send it: back to the list with a notice."""
    await row.get_by_text("Acknowledge", exact=True).first.click()  # opens the form
    await row.get_by_label("Comment (optional)").fill(note)
    await row.get_by_role("button", name="Acknowledge").click()
    await page.wait_for_url(lambda url: "requested=acknowledge" in url)


async def test_a_gpu_with_an_xid_turns_red_and_its_alert_is_acknowledged(
    admin_tab: Page, stack: Stack
) -> None:
    page = admin_tab
    await page.goto("/nodes")
    node = page.locator("article.node-cell").first
    node_id = await node.get_attribute("data-node")
    assert node_id
    gpu = node.locator(f'.gpu[data-gpu="{BROKEN_GPU}"]')
    await expect(node.locator(".gpu")).to_have_count(8)
    assert "unhealthy" not in (await gpu.get_attribute("class") or "")
    await expect(node.locator(".node-badges")).to_contain_text("simulated")
    await screenshot(page, "nodes")
    await screenshot(page, "nodes", phone=True)
    await mark_page(page)

    # The running exporter reads its fault file again when it changes (simulated.py).
    (stack.home / "gpu-faults.yaml").write_text(f"gpus:\n  {BROKEN_GPU}: {{xid: 79}}\n")
    await expect(gpu).to_have_class("gpu unhealthy", timeout=30_000)
    assert "Xid" in (await gpu.get_attribute("title") or "")
    await expect(node).to_have_class("node-cell drained")  # the monitor drained it (Xid 79)
    others = node.locator(".gpu.unhealthy")
    await expect(others).to_have_count(1)  # that GPU only
    assert await still_same_page(page)
    await screenshot(page, "nodes-xid")

    await page.goto(f"/nodes/{node_id}")
    await expect(page.get_by_role("heading", level=1)).to_contain_text(node_id)
    await screenshot(page, "node")
    await screenshot(page, "node", phone=True)

    # The GpuUnhealthy alert arrives on the open alerts page by itself.
    await page.goto("/alerts")
    await mark_page(page)
    row = page.locator("tr[data-alert]", has_text="GpuUnhealthy")
    await expect(row).to_be_visible(timeout=30_000)
    assert await still_same_page(page)
    await expect(row.locator(".badge").first).to_have_text("critical")
    alert_id = await row.get_attribute("data-alert")
    await screenshot(page, "alerts")
    await screenshot(page, "alerts", phone=True)

    # A second tab on every alert watches the acknowledgement arrive by itself. It is
    # connected before anything happens: an event that comes between a page's render and
    # its stream's start is not replayed to it.
    watcher = await page.context.new_page()
    async with watcher.expect_response(lambda response: "/live/alerts" in response.url):
        await watcher.goto("/alerts?state=all")
    await watcher.wait_for_timeout(500)  # the stream registers just after its first bytes
    await mark_page(watcher)
    watched = watcher.locator(f'tr[data-alert="{alert_id}"]')
    await expect(watched).to_have_attribute("data-state", "firing")

    await _acknowledge(page, row, "reseating it")
    await expect(page.get_by_role("status").filter(has_text="Acknowledge requested")).to_be_visible()

    await expect(watched).to_have_attribute("data-state", "acknowledged", timeout=20_000)
    await expect(watched).to_contain_text("by admin")
    assert await still_same_page(watcher)
    await watcher.close()
    await page.goto("/alerts?state=acknowledged")
    acked = page.locator(f'tr[data-alert="{alert_id}"]')
    await expect(acked).to_have_attribute("data-state", "acknowledged")
    await expect(acked).to_contain_text("by admin")
    await screenshot(page, "alerts-acknowledged")
    # The other browser tests share this stack: the GPU is mended and its node back in service.
    (stack.home / "gpu-faults.yaml").write_text("")
    undrained = await asyncio.to_thread(corral, stack, "undrain", node_id)
    assert undrained.returncode == 0, undrained.stderr


async def test_the_other_pages_render(admin_tab: Page, stack: Stack) -> None:
    page = admin_tab
    for path, name, heading in (
        ("/", "home", None),
        ("/virtual-clusters", "vcs", "Virtual clusters"),
        ("/usage", "usage", "Usage"),
    ):
        response = await page.goto(path)
        assert response is not None
        assert response.status == 200, (path, response.status)
        if heading:
            await expect(page.get_by_role("heading", level=1)).to_contain_text(heading, ignore_case=True)
        charts = page.locator(".chart")
        for index in range(await charts.count()):  # drawn by uPlot once its script has run
            await expect(charts.nth(index).locator(".uplot")).to_have_count(1)
        await screenshot(page, name)
        await screenshot(page, name, phone=True)
