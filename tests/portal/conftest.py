"""The portal served in-process over ASGI on a real database, as a browser talks to it:
cookies, forms, CSRF tokens (``Browser``); signed in as the admin (``portal``) or as a
user of one's own (``sign_in``). Browser tests with Chromium are in ``browser/``."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import httpx
import pytest

from services.api.app import create_app
from services.api.settings import ApiSettings, Settings
from services.api.tenants.auth import hash_token, upsert_token
from services.api.tenants.repository import TenantRepository
from shared.db.pool import Database
from shared.service import Health

_CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]{64})"')
_SIGN_IN = re.compile(r'name="sign_in_token" value="([^"]+)"')


@dataclass
class Browser:
    """An HTTP client that behaves as a browser would: cookies kept, forms carry the CSRF
    token of the last page that had one."""

    http: httpx.AsyncClient
    csrf: str = ""

    async def get(self, path: str, **kwargs: object) -> httpx.Response:
        response = await self.http.get(path, **kwargs)  # type: ignore[arg-type]
        found = _CSRF.search(response.text)
        if found:
            self.csrf = found.group(1)
        return response

    async def post(self, path: str, data: dict[str, str] | None = None, csrf: bool = True) -> httpx.Response:
        form = dict(data or {})
        if csrf:
            form.setdefault("csrf_token", self.csrf)
        return await self.http.post(path, data=form)

    async def sign_in(self, token: str) -> httpx.Response:
        page = await self.http.get("/login")
        found = _SIGN_IN.search(page.text)
        assert found, page.text
        response = await self.http.post(
            "/login", data={"token": token, "sign_in_token": found.group(1), "next": "/"}
        )
        await self.get("/")  # picks up the session's CSRF token
        return response


@pytest.fixture
async def portal_app(db: Database) -> object:
    settings = Settings(api=ApiSettings())
    return create_app(db, Health("api", {"postgres": db.ping}), settings)


@pytest.fixture
async def sign_in_with(portal_app: object) -> AsyncIterator[Callable[[str], Awaitable[Browser]]]:
    """``await sign_in_with(token)``: a client signed in with that token."""
    clients: list[httpx.AsyncClient] = []

    async def make(token: str) -> Browser:
        transport = httpx.ASGITransport(app=portal_app)  # type: ignore[arg-type]
        http = httpx.AsyncClient(transport=transport, base_url="http://corral.test")
        clients.append(http)
        browser = Browser(http)
        response = await browser.sign_in(token)
        assert response.status_code == 303, response.text
        return browser

    yield make
    for http in clients:
        await http.aclose()


@pytest.fixture
async def browser_for(
    db: Database, sign_in_with: Callable[[str], Awaitable[Browser]]
) -> Callable[[str, str], Awaitable[Browser]]:
    """``await browser_for(username, role)``: a client signed in as a user of that role
    (created with a token of every scope the role may hold)."""

    async def make(username: str, role: str = "user") -> Browser:
        token = f"crl_{username}_token"
        await upsert_token(
            TenantRepository(db), f"tok-{username}", username, hash_token(token), role, username
        )
        return await sign_in_with(token)

    return make


@pytest.fixture
async def portal(browser_for: Callable[[str, str], Awaitable[Browser]]) -> Browser:
    """Signed in as an admin."""
    return await browser_for("root", "admin")
