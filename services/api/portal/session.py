"""Signing in to the portal: a bearer token exchanged once for a session cookie.

Why a session and not the token in the browser: ``EventSource`` (the live pages) cannot
send an ``Authorization`` header, and a token in a URL ends up in logs and history. So the
sign-in form posts the token once; the API verifies it exactly as it verifies a bearer
token (``tenants.auth.principal_of``) and answers with a random session secret in an
``HttpOnly``, ``SameSite=Strict`` cookie. Postgres keeps only SHA-256 hashes of the secret
and of the token (``api.portal_sessions``). Every request maps the session back to its
token and verifies that again (cached for ``TOKEN_CACHE_S``, as bearer tokens are), so a
revoked or expired token, or a demoted user, ends or narrows the session within seconds:
a session never outlives or outranks its token. The scope a request needs follows from
its method, as for the API (``auth.check_scope``).

CSRF. ``SameSite=Strict`` already keeps other sites' requests from carrying the cookie;
every mutating request must also carry a synchronizer token, an HMAC of the session
secret (so the server stores nothing more): as the ``csrf_token`` form field, or the
``X-CSRF-Token`` header that htmx adds to its requests (``base.html``). Sign-in itself
has no session yet, so its form uses a double-submit cookie instead, which stops a
forged sign-in into someone else's account.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from urllib.parse import quote

from fastapi import Request, Response

from services.api.portal.repository import SessionRepository, SessionRow
from services.api.tenants.auth import Principal, TokenCache, check_scope, hash_token, principal_of
from services.api.tenants.repository import TenantRepository
from shared.clock import utcnow
from shared.errors import CorralError, Forbidden, Unauthorized

SESSION_COOKIE = "corral_session"
SIGN_IN_COOKIE = "corral_sign_in"  # the double-submit token of the sign-in form
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
# A session is looked up in Postgres at most this often per API process: as long as a
# verified bearer token is trusted (auth.TOKEN_CACHE_S), so signing out elsewhere takes
# effect within as long as revoking a token does.
SESSION_CACHE_S = 5.0
_CSRF_CONTEXT = b"corral portal csrf v1"


class SignInNeeded(CorralError):
    """No session, or one that no longer holds: the portal sends the browser to sign in
    (``errors.py``) rather than answering 401."""

    status = 401
    problem_type = "unauthorized"
    title = "Sign in"

    def __init__(self, detail: str, back_to: str = "/") -> None:
        super().__init__(detail)
        self.back_to = back_to


@dataclass(frozen=True)
class PortalUser:
    """Who is looking at a page: the principal of the session's token, and the CSRF token
    that the page's forms must send back."""

    principal: Principal
    csrf: str

    @property
    def username(self) -> str:
        return self.principal.username

    @property
    def is_admin(self) -> bool:
        return self.principal.is_admin


def csrf_for(secret: str) -> str:
    return hmac.new(secret.encode(), _CSRF_CONTEXT, hashlib.sha256).hexdigest()


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path on this site only (never ``//host`` or a URL)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def sign_in_url(back_to: str) -> str:
    return "/login?next=" + quote(safe_next(back_to), safe="/")


class Sessions:
    """Sessions of this API process: sign in, out, and who a cookie stands for."""

    def __init__(
        self, repo: SessionRepository, tenants: TenantRepository, tokens: TokenCache, lifetime_s: float
    ):
        self._repo = repo
        self._tenants = tenants
        self._tokens = tokens
        self.lifetime_s = lifetime_s
        self._cache: dict[str, tuple[float, SessionRow]] = {}

    async def sign_in(self, token: str) -> tuple[str, Principal]:
        """A new session for a valid token: the cookie's secret, and whom it stands for.
        Raises ``Unauthorized`` (saying why) for a token unknown, revoked or expired."""
        token_digest = hash_token(token.strip())
        principal = await principal_of(self._tokens, self._tenants, token_digest)
        check_scope(principal, "GET")
        secret = secrets.token_urlsafe(32)
        await self._repo.insert(hash_token(secret), token_digest, principal.username, self.lifetime_s)
        return secret, principal

    async def sign_out(self, secret: str) -> None:
        digest = hash_token(secret)
        self._cache.pop(digest, None)
        await self._repo.delete(digest)

    async def user(self, request: Request, as_method: str | None = None) -> PortalUser:
        """The signed-in user of this request, if the scope its method (or ``as_method``)
        needs is theirs; ``SignInNeeded`` without a session that holds, 403 without the
        scope."""
        back_to = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        secret = request.cookies.get(SESSION_COOKIE, "")
        if not secret:
            raise SignInNeeded("sign in with an API token to use the portal", back_to)
        row = await self._session(hash_token(secret))
        if row is None:
            raise SignInNeeded("your session ended; sign in again", back_to)
        try:
            principal = await principal_of(self._tokens, self._tenants, row.token_sha256)
        except Unauthorized as exc:
            raise SignInNeeded(f"your session's token no longer holds ({exc.detail})", back_to) from None
        request.state.principal = principal  # for the audit log, as the API's routes do
        check_scope(principal, as_method or request.method)
        return PortalUser(principal, csrf_for(secret))

    async def _session(self, digest: str) -> SessionRow | None:
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > now and cached[1].expires_at > utcnow():
            return cached[1]
        row = await self._repo.by_secret(digest)
        if row is None:
            self._cache.pop(digest, None)
            return None
        if len(self._cache) >= 10_000:
            self._cache.clear()  # bounded, as the token cache
        self._cache[digest] = (now + SESSION_CACHE_S, row)
        return row


def check_csrf(request: Request, user: PortalUser, form_value: str | None) -> None:
    """403 unless a mutating request carries this session's CSRF token."""
    sent = request.headers.get(CSRF_HEADER) or form_value or ""
    if not hmac.compare_digest(sent.encode(), user.csrf.encode()):
        raise Forbidden(
            "this form's CSRF token is missing or wrong (a form from another site, or from an "
            "old session); reload the page and try again"
        )


def set_session_cookie(request: Request, response: Response, secret: str, lifetime_s: float) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        secret,
        max_age=int(lifetime_s),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


def new_sign_in_token(request: Request, response: Response) -> str:
    """The double-submit token of a sign-in form: in a cookie and in the form."""
    token = request.cookies.get(SIGN_IN_COOKIE) or secrets.token_urlsafe(24)
    response.set_cookie(
        SIGN_IN_COOKIE,
        token,
        max_age=3600,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/login",
    )
    return token


def check_sign_in_token(request: Request, sent: str) -> None:
    expected = request.cookies.get(SIGN_IN_COOKIE, "")
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise Forbidden(
            "this sign-in form is stale or was not served by Corral; reload the page and try again"
        )
