"""What the browser tests do to pages, as a person would: sign in through the form, keep
a screenshot, tell whether the page navigated, read a table's cells."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from playwright.async_api import Page, ViewportSize

REPO = Path(__file__).resolve().parents[3]
DESKTOP = ViewportSize(width=1280, height=900)
PHONE = ViewportSize(width=390, height=844)


def artifacts_dir() -> Path:
    """``$CORRAL_TEST_ARTIFACTS/portal``, else ``.corral/test-artifacts/portal`` (git-ignored)."""
    base = os.environ.get("CORRAL_TEST_ARTIFACTS")
    path = (Path(base) if base else REPO / ".corral" / "test-artifacts") / "portal"
    path.mkdir(parents=True, exist_ok=True)
    return path


async def screenshot(page: Page, name: str, *, phone: bool = False) -> Path:
    """The whole page as a PNG artifact named for what it shows; ``phone``: at 390 px wide
    (the viewport is put back afterwards)."""
    before = page.viewport_size
    if phone:
        await page.set_viewport_size(PHONE)
    path = artifacts_dir() / f"{name}{'-phone' if phone else ''}.png"
    await page.screenshot(path=str(path), full_page=True)
    if phone and before is not None:
        await page.set_viewport_size(before)
    return path


async def sign_in(page: Page, token: str, then: str = "/") -> None:
    """Through the sign-in form, as a person does: paste the token, press the button."""
    await page.goto(f"/login?next={then}")
    await page.get_by_label("API token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(lambda url: "/login" not in url)


async def mark_page(page: Page) -> None:
    """Tag this document, so ``still_same_page`` tells a live update from a reload."""
    await page.evaluate("window.__corralMarker = 1")


async def still_same_page(page: Page) -> bool:
    return bool(await page.evaluate("window.__corralMarker === 1"))


async def table_rows(page: Page, selector: str = "table") -> list[list[str]]:
    """The text of each body row's cells of the first table matching ``selector``."""
    rows: Any = await page.eval_on_selector(
        selector,
        """t => [...t.querySelectorAll('tbody tr')].map(
               r => [...r.querySelectorAll('td, th')].map(c => c.innerText.trim()))""",
    )
    return [list(map(str, row)) for row in rows]
