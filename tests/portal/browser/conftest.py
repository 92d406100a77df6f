"""The portal in a real browser: Chromium driven by Playwright against a whole stack.

How it is wired, and why:

- **Async Playwright, our own fixtures.** pytest-playwright's fixtures (``page``,
  ``browser``) drive the *sync* API, which runs its own event loop in a greenlet and marks
  it as running between calls: no ``asyncio.run`` in the same thread, so none of the
  suite's async helpers (``Stack``, asyncpg, ``httpx.AsyncClient``) could be used in the
  same test. These tests are ``async def`` like the rest of the suite and use
  ``playwright.async_api`` through the fixtures below: ``chromium`` (the browser),
  ``profile`` (a fresh browser context), ``tab`` (a page in it) and ``admin_tab`` (signed
  in as the stack's admin). They are named apart from pytest-playwright's on purpose: a
  test asking for a fixture named ``page`` or ``browser`` is parametrized by that plugin,
  whose sync fixtures and CLI options stay there for poking at a page by hand.
- **One stack and one Chromium for all of them.** Starting ``corral up`` takes seconds,
  so the browser tests share one stack (this ``stack`` overrides the function-scoped one
  of ``tests/fixtures/stack.py``; asking for it still marks a test ``e2e``) on a database
  of their own, and one browser; every test gets a fresh browser context (cookies,
  storage), so tests do not see each other's sign-ins or theme. A test that needs the
  cluster in a state (a GPU fault) puts it back when it ends. The tests run in the
  package's event loop (``pytestmark = pytest.mark.asyncio(loop_scope="package")`` in
  each module), as do these fixtures.
- **Debian's Chromium** at ``/usr/bin/chromium``, never ``playwright install`` (it
  downloads a browser, which machines here cannot do). If it is missing it is installed
  with apt (``tests/system_packages.py``); without apt the tests are skipped, saying so.
- **Screenshots** of every page, whole and at desktop or phone width, go to
  ``$CORRAL_TEST_ARTIFACTS/portal`` (default ``.corral/test-artifacts/portal``, which git
  ignores): ``browsing.screenshot(page, name)``. They are for a person to look at; nothing
  compares them.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

from corral.local.ports import free_port
from tests.conftest import fresh_database
from tests.e2e.stack import Stack
from tests.infra import PostgresServer, world_readable_tempdir
from tests.portal.browser.browsing import DESKTOP, sign_in
from tests.system_packages import ensure_debian_packages

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
# Live pages are told of a change at most once a CORRAL_API_PORTAL_LIVE_INTERVAL_S; a
# short one keeps these tests quick without changing what they show.
PORTAL_ENV = {"CORRAL_API_PORTAL_LIVE_INTERVAL_S": "0.3", "CORRAL_API_PORTAL_TELEMETRY_REFRESH_S": "1"}


@pytest.fixture(scope="session")
def chromium_binary() -> Path:
    ensure_debian_packages({CHROMIUM: "chromium"})
    return CHROMIUM


@pytest.fixture(scope="package")
def stack_home() -> Iterator[Path]:
    path = world_readable_tempdir("corral-portal-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def stack_database_url(pg: PostgresServer) -> AsyncIterator[str]:
    """A migrated database of the browser tests' own, on the suite's Postgres."""
    async with fresh_database(pg, "portal") as url:
        yield url


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def stack(stack_database_url: str, stack_home: Path) -> AsyncIterator[Stack]:
    env = {
        "CORRAL_DATABASE_URL": stack_database_url,
        "CORRAL_NATS_PORT": str(free_port()),
        **PORTAL_ENV,
    }
    async with Stack(stack_home, env).running() as running:
        yield running


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def chromium(chromium_binary: Path) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=str(chromium_binary), args=CHROMIUM_ARGS)
        yield launched
        await launched.close()


@pytest_asyncio.fixture(loop_scope="package")
async def profile(chromium: Browser, stack: Stack) -> AsyncIterator[BrowserContext]:
    """A fresh browser profile on the stack's portal: no cookies, no stored theme, light
    system theme."""
    fresh = await chromium.new_context(base_url=stack.base_url, viewport=DESKTOP, color_scheme="light")
    fresh.set_default_timeout(15_000)
    yield fresh
    await fresh.close()


@pytest_asyncio.fixture(loop_scope="package")
async def tab(profile: BrowserContext) -> Page:
    return await profile.new_page()


@pytest_asyncio.fixture(loop_scope="package")
async def admin_tab(tab: Page, stack: Stack) -> Page:
    """A page signed in with the stack's admin token."""
    await sign_in(tab, stack.token())
    return tab
