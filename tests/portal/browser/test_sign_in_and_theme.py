"""Signing in, the theme, and a page that does not exist, in Chromium against a stack."""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect

from tests.e2e.stack import Stack
from tests.portal.browser.browsing import screenshot, sign_in

pytestmark = pytest.mark.asyncio(loop_scope="package")


async def _background(page: Page) -> str:
    colour: str = await page.evaluate("getComputedStyle(document.body).backgroundColor")
    return colour


async def test_a_token_signs_in_and_a_wrong_one_is_told_why(tab: Page, stack: Stack) -> None:
    page = tab
    await page.goto("/jobs")
    # No session: sent to sign in, and brought back to where one was going.
    assert "/login" in page.url
    await screenshot(page, "sign-in")
    await screenshot(page, "sign-in", phone=True)

    await page.get_by_label("API token").fill("crl_not-a-token")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("alert")).to_be_visible()
    assert "/login" in page.url
    assert await page.get_by_role("alert").inner_text()  # says why, in words
    await screenshot(page, "sign-in-refused")

    await page.get_by_label("API token").fill(stack.token())
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(lambda url: url.endswith("/jobs"))
    header = page.locator("header.top")
    await expect(header.locator(".who")).to_contain_text("admin")
    await expect(
        page.get_by_role("navigation", name="Sections").get_by_role("link", name="Jobs")
    ).to_have_attribute("aria-current", "page")
    # The token itself is nowhere the page's scripts can read it.
    assert stack.token() not in await page.content()
    assert stack.token() not in await page.evaluate("document.cookie + JSON.stringify(localStorage)")

    await page.get_by_role("button", name="Sign out").click()
    await page.wait_for_url(lambda url: "/login" in url)
    await page.goto("/")
    assert "/login" in page.url  # the session is over


async def test_the_dark_theme_sticks_across_a_reload(tab: Page, stack: Stack) -> None:
    page = tab
    await sign_in(page, stack.token())
    light = await _background(page)
    toggle = page.get_by_role("button", name="Toggle dark theme")
    await toggle.click()
    dark = await _background(page)
    assert dark != light
    assert await page.evaluate("document.documentElement.dataset.theme") == "dark"
    # Dark means dark: the background's channels are low.
    channels = [int(c) for c in dark.removeprefix("rgb(").removesuffix(")").split(",")]
    assert max(channels) < 64, dark

    await page.reload()
    assert await _background(page) == dark
    await screenshot(page, "home-dark")
    await page.goto("/jobs")
    assert await _background(page) == dark
    await screenshot(page, "jobs-dark")
    await screenshot(page, "jobs-dark", phone=True)

    await toggle.focus()
    await page.keyboard.press("Enter")  # from the keyboard too
    assert await _background(page) == light
    await page.reload()
    assert await _background(page) == light


async def test_an_unknown_page_is_a_404_page_in_the_portal_style(tab: Page, stack: Stack) -> None:
    page = tab
    await sign_in(page, stack.token())
    response = await page.goto("/no/such/page")
    assert response is not None
    assert response.status == 404
    await expect(page.get_by_role("heading", level=1)).to_contain_text("Not found")
    await expect(page.get_by_role("link", name="Back to the home page")).to_be_visible()
    await screenshot(page, "not-found")

    response = await page.goto("/jobs/job-doesnotexist")
    assert response is not None
    assert response.status == 404
    await screenshot(page, "job-not-found")
