"""Signing in to the portal: a token exchanged once for an HttpOnly, SameSite=Strict session
cookie; forged sign-in and sign-out forms refused; a session worth nothing once its token
is revoked; never a token in a URL or a page; never a redirect off the site."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from services.api.tenants.auth import hash_token, upsert_token
from services.api.tenants.repository import TenantRepository
from shared.db.pool import Database
from tests.portal.conftest import Browser

_SIGN_IN = re.compile(r'name="sign_in_token" value="([^"]+)"')


@pytest.fixture
async def anonymous(portal_app: object) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=portal_app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://corral.test") as http:
        yield http


async def _sign_in_form(http: httpx.AsyncClient) -> str:
    page = await http.get("/login")
    assert page.status_code == 200
    found = _SIGN_IN.search(page.text)
    assert found is not None
    return found.group(1)


async def _sessions(db: Database) -> int:
    count: int = await db.fetchval("SELECT count(*) FROM api.portal_sessions")
    return count


async def test_a_page_without_a_session_sends_the_browser_to_sign_in_and_back(
    anonymous: httpx.AsyncClient, db: Database
) -> None:
    response = await anonymous.get("/?view=mine")
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=/%3Fview%3Dmine"
    # An htmx panel whose session ended takes the whole page to the form, not the cell.
    response = await anonymous.get("/", headers={"HX-Request": "true"})
    assert response.headers["HX-Redirect"] == "/login?next=/"

    await upsert_token(TenantRepository(db), "tok-ann", "ann", hash_token("crl_ann"), "user", "ann")
    form = {"token": "crl_ann", "sign_in_token": await _sign_in_form(anonymous), "next": "/?view=mine"}
    response = await anonymous.post("/login", data=form)
    assert response.status_code == 303
    assert response.headers["location"] == "/?view=mine"


async def test_the_cookie_is_http_only_strict_and_no_page_shows_the_token(
    anonymous: httpx.AsyncClient, db: Database
) -> None:
    await upsert_token(TenantRepository(db), "tok-ann", "ann", hash_token("crl_ann"), "user", "ann")
    form = {"token": "crl_ann", "sign_in_token": await _sign_in_form(anonymous)}
    response = await anonymous.post("/login", data=form)
    cookie = response.headers["set-cookie"]
    assert cookie.startswith("corral_session=")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
    assert "crl_ann" not in cookie
    assert "crl_ann" not in response.headers["location"]
    page = await anonymous.get("/")
    assert page.status_code == 200
    assert "crl_ann" not in page.text
    # Postgres holds hashes only.
    row = await db.fetchrow("SELECT secret_sha256, token_sha256 FROM api.portal_sessions")
    assert row is not None
    assert row["token_sha256"] == hash_token("crl_ann")
    assert row["secret_sha256"] != cookie.split(";")[0].split("=", 1)[1]


@pytest.mark.parametrize(
    ("token", "says"),
    [("crl_nobody", "unknown"), ("", "paste an API token"), ("x" * 201, "at most 200 characters")],
)
async def test_a_bad_token_shows_the_form_again_with_why_and_starts_no_session(
    anonymous: httpx.AsyncClient, db: Database, token: str, says: str
) -> None:
    form = {"token": token, "sign_in_token": await _sign_in_form(anonymous)}
    response = await anonymous.post("/login", data=form)
    assert response.status_code in (401, 422)
    assert says in response.text
    assert "set-cookie" not in response.headers or "corral_session=" not in response.headers["set-cookie"]
    assert await _sessions(db) == 0


async def test_a_sign_in_form_not_served_by_corral_is_refused(
    anonymous: httpx.AsyncClient, db: Database
) -> None:
    await upsert_token(TenantRepository(db), "tok-ann", "ann", hash_token("crl_ann"), "user", "ann")
    # A forged form: the attacker's page cannot read or set the double-submit cookie.
    response = await anonymous.post("/login", data={"token": "crl_ann", "sign_in_token": "forged"})
    assert response.status_code == 403
    assert "reload the page" in response.text
    assert await _sessions(db) == 0


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "/\\evil.example"])
async def test_sign_in_never_redirects_off_the_site(
    anonymous: httpx.AsyncClient, db: Database, target: str
) -> None:
    await upsert_token(TenantRepository(db), "tok-ann", "ann", hash_token("crl_ann"), "user", "ann")
    form = {"token": "crl_ann", "sign_in_token": await _sign_in_form(anonymous), "next": target}
    response = await anonymous.post("/login", data=form)
    assert response.status_code == 303
    assert response.headers["location"] == "/"


async def test_sign_out_needs_the_csrf_token_and_then_ends_the_session_server_side(
    portal: Browser, db: Database
) -> None:
    refused = await portal.post("/logout", {"csrf_token": "0" * 64})
    assert refused.status_code == 403
    assert await _sessions(db) == 1
    response = await portal.post("/logout")
    assert response.status_code == 303
    assert await _sessions(db) == 0
    assert (await portal.http.get("/")).status_code == 303


async def test_a_revoked_token_ends_its_sessions(
    browser_for: Callable[[str, str], Awaitable[Browser]], db: Database, portal_app: object, admin_token: str
) -> None:
    alice = await browser_for("alice", "user")
    assert (await alice.get("/")).status_code == 200
    transport = httpx.ASGITransport(app=portal_app)  # type: ignore[arg-type]
    headers = {"Authorization": f"Bearer {admin_token}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://corral.test", headers=headers) as api:
        assert (await api.delete("/api/v1/tokens/tok-alice")).status_code == 204
    response = await alice.http.get("/")
    assert response.status_code == 303
    assert response.headers["location"].startswith("/login")


async def test_a_read_only_session_reads_and_may_sign_out(db: Database, anonymous: httpx.AsyncClient) -> None:
    await TenantRepository(db).upsert_token("tok-ro", "ro", hash_token("crl_ro"), "reader", "user", ["read"])
    form = {"token": "crl_ro", "sign_in_token": await _sign_in_form(anonymous)}
    assert (await anonymous.post("/login", data=form)).status_code == 303
    page = await anonymous.get("/")
    assert page.status_code == 200
    csrf = re.search(r'name="csrf_token" value="([0-9a-f]{64})"', page.text)
    assert csrf is not None
    response = await anonymous.post("/logout", data={"csrf_token": csrf.group(1)})
    assert response.status_code == 303
    assert await _sessions(db) == 0


async def test_an_unknown_path_is_a_portal_page_for_browsers_and_a_problem_for_clients(
    anonymous: httpx.AsyncClient,
) -> None:
    page = await anonymous.get("/no/such/page", headers={"Accept": "text/html"})
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert "there is no page at /no/such/page" in page.text
    problem = await anonymous.get("/api/v1/no-such", headers={"Accept": "text/html"})
    assert problem.status_code == 404
    assert problem.headers["content-type"] == "application/problem+json"


async def test_a_signed_in_users_error_pages_keep_the_navigation(portal: Browser) -> None:
    page = await portal.get("/no/such/page", headers={"Accept": "text/html"})
    assert page.status_code == 404
    assert 'aria-label="Sections"' in page.text
    assert 'href="/jobs"' in page.text
