"""Bearer tokens: stored as SHA-256 hashes, never in the clear; scopes, expiry, revocation.

The bootstrap admin token is generated on first start into ``$CORRAL_HOME/admin-token``
(mode 0600) and its hash upserted, so a fresh ``make up`` prints a token that works and
a second one keeps it. Tokens are high-entropy random strings, so a plain SHA-256 (not
a slow password hash) is the right way to store them: it makes lookup one indexed read.

Scopes. A token holds some of ``read``, ``submit`` and ``admin``; each implies the ones
before it (``SCOPE_ORDER``), so a ``submit`` token can read what it submitted and an
``admin`` token can do all three. What a request needs follows from its method, here,
once, so no route can forget: reads (GET, HEAD) need ``read``, everything else
``submit``; admin-only operations also call ``require_admin``, which needs ``admin``.
``exec`` (a shell, a port or a proxied page inside a running task) stands outside that
ladder: running commands in a task is more than submitting one, so a token carries it
only when it was made with it, or is an ``admin`` token (``implied``); the interactive
routes ask for it with ``require_scope``. ``serve`` (calling a service through
``/serve/{name}/``) stands outside the ladder the same way, so an application can be given
a token that does that and nothing else.
A token acts for its user only with the scopes that user may still hold (``admin`` only
while the user is an admin), checked on every verification: demoting a user disarms their
admin tokens within ``TOKEN_CACHE_S``, and a token can never carry more than its user.

Every slice needs to know who is asking, so this is the one module of the tenants slice
that the others import (``AuthenticatedPrincipal``, ``Principal``, ``require_admin``);
the import-linter contracts in pyproject.toml hold them to it.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from services.api.dependencies import database
from services.api.tenants.dependencies import TenantsRepo
from services.api.tenants.repository import TenantRepository, TokenGrant
from shared.clock import utcnow
from shared.errors import Forbidden, Unauthorized

# A verified token is trusted for this long without asking Postgres again; revoking a
# token therefore takes effect within this many seconds.
TOKEN_CACHE_S = 5.0
TOKEN_PREFIX = "crl_"  # noqa: S105  # a prefix that makes leaked tokens greppable, not a secret
BOOTSTRAP_TOKEN_ID = "tok-admin-bootstrap"  # noqa: S105  # an id, not a secret

Scope = Literal["read", "submit", "admin", "exec", "serve"]
SCOPE_ORDER: tuple[Scope, ...] = ("read", "submit", "admin")
# Every scope, in the order they are listed; ``exec`` and ``serve`` are not on the ladder above.
OFF_LADDER: tuple[Scope, ...] = ("exec", "serve")
ALL_SCOPES: tuple[Scope, ...] = (*SCOPE_ORDER, *OFF_LADDER)
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def implied(scopes: Iterable[str]) -> frozenset[Scope]:
    """Every scope a token made with the given ones holds: each implies those before it in
    ``SCOPE_ORDER``; ``exec`` and ``serve`` only themselves (an ``admin`` token acts with
    them as long as it acts as an admin: ``with_admin_powers``)."""
    given = set(scopes)
    highest = max((SCOPE_ORDER.index(s) for s in given if s in SCOPE_ORDER), default=-1)
    granted: set[Scope] = set(SCOPE_ORDER[: highest + 1])
    granted.update(scope for scope in OFF_LADDER if scope in given)
    return frozenset(granted)


def with_admin_powers(scopes: frozenset[Scope]) -> frozenset[Scope]:
    """``admin`` implies ``exec`` and ``serve``; derived at each verification rather than
    stored, so a demoted admin's old token loses them together."""
    return scopes | set(OFF_LADDER) if "admin" in scopes else scopes


def allowed_for_role(role: str) -> frozenset[Scope]:
    """The scopes a user of this role may hold."""
    return frozenset(ALL_SCOPES) if role == "admin" else frozenset(("read", "submit", *OFF_LADDER))


@dataclass(frozen=True)
class Principal:
    """Who is asking: the token's user, and the scopes this token grants them now."""

    username: str
    role: str
    scopes: frozenset[Scope] = frozenset(ALL_SCOPES)
    token_id: str | None = None

    @property
    def is_admin(self) -> bool:
        """Acts as an admin: an admin user, with a token that carries ``admin``. An admin's
        read-only token sees what any user sees, no more."""
        return self.role == "admin" and "admin" in self.scopes

    @property
    def vc_user(self) -> str | None:
        """Whom VC access lists apply to: None for an admin, who may use every VC."""
        return None if self.is_admin else self.username


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def load_or_create_admin_token(path: Path) -> str:
    """The admin token in ``path``, made there first if it has none. Several API
    processes may start at once: the file appears whole or not at all (written aside,
    then linked into place, which fails if another got there first), so all of them
    read the same token."""
    if path.exists():
        token = path.read_text().strip()
        if token:
            return token
        path.unlink(missing_ok=True)  # an empty file (a crash mid-write): make it anew
    path.parent.mkdir(parents=True, exist_ok=True)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    aside.unlink(missing_ok=True)  # (a crashed start's, by the same pid)
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(token + "\n")
        try:
            os.link(aside, path)
        except FileExistsError:
            return path.read_text().strip()  # another process's, made meanwhile
    finally:
        aside.unlink(missing_ok=True)
    return token


async def bootstrap_admin(repo: TenantRepository, path: Path) -> None:
    token = load_or_create_admin_token(path)
    await upsert_token(repo, BOOTSTRAP_TOKEN_ID, "bootstrap admin", hash_token(token), "admin", "admin")


async def upsert_token(
    repo: TenantRepository, token_id: str, name: str, sha256: str, role: str, username: str
) -> None:
    """A token made outside the API (the bootstrap admin's; tests'): its user gets
    ``role`` and the token every scope that role may hold, without expiry."""
    scopes = [s for s in ALL_SCOPES if s in allowed_for_role(role)]
    await repo.upsert_token(token_id, name, sha256, username, role, scopes)


def require_admin(principal: Principal, to: str) -> None:
    """403 unless an admin asks with a token that carries the ``admin`` scope; ``to`` says
    what only an admin may do."""
    if principal.role == "admin" and not principal.is_admin:
        raise Forbidden(f"only an admin may {to}, and this token lacks the 'admin' scope; use one with it")
    if not principal.is_admin:
        raise Forbidden(f"only an admin may {to}")


async def current_principal(request: Request, repo: TenantsRepo, cache: Tokens) -> Principal:
    """The verified caller, if this token's scopes allow the request's method (403 if
    not). Also left in ``request.state.principal`` for the audit log."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(
            "missing bearer token: send 'Authorization: Bearer <token>' "
            "(the admin token is in $CORRAL_HOME/admin-token)"
        )
    digest = hash_token(token.strip())
    principal = await principal_of(cache, repo, digest)
    request.state.principal = principal
    request.state.token_digest = digest
    check_scope(principal, request.method)
    return principal


def check_scope(principal: Principal, method: str) -> None:
    """403 unless the principal's token carries the scope ``method`` needs: ``read`` for
    reads, ``submit`` for everything else."""
    require_scope(principal, "read" if method in _READ_METHODS else "submit", method)


def require_scope(principal: Principal, needed: Scope, to: str) -> None:
    """403 unless the principal's token carries ``needed``; ``to`` says what needs it."""
    if needed not in principal.scopes:
        held = ", ".join(s for s in ALL_SCOPES if s in principal.scopes) or "none"
        raise Forbidden(
            f"this token has the scopes {held}; {to} needs a token with the {needed!r} scope"
            " (create one with POST /api/v1/tokens)"
        )


async def principal_of(cache: TokenCache, repo: TenantRepository, digest: str) -> Principal:
    """Whom the token (by its hash) stands for now: from this process's cache, else from
    Postgres. Raises ``Unauthorized`` for a token unknown, revoked or expired."""
    principal = cache.get(digest)
    if principal is None:
        grant = await repo.token_by_hash(digest)
        principal = _verified(grant)
        cache.put(digest, principal, grant.expires_at if grant else None)
    return principal


async def still_stands_for(request: Request, principal: Principal) -> bool:
    """Whether the token this request came with still stands for the same user, role and
    scopes (a long-lived request, such as an event stream, asks now and then)."""
    digest: str = request.state.token_digest
    repo = TenantRepository(await database(request))
    try:
        return await principal_of(await token_cache(request), repo, digest) == principal
    except Unauthorized:
        return False


async def principal_of_bearer(conn: HTTPConnection, token: str) -> tuple[Principal, str]:
    """Whom a bearer token stands for now, and its hash, for a caller that verifies on its
    own rather than through ``AuthenticatedPrincipal`` (a WebSocket; a route that also
    takes the portal's cookie). Raises ``Unauthorized`` as ``principal_of``; checks no scope."""
    digest = hash_token(token.strip())
    repo = TenantRepository(conn.app.state.db)
    cache: TokenCache = conn.app.state.token_cache
    return await principal_of(cache, repo, digest), digest


def _verified(grant: TokenGrant | None) -> Principal:
    if grant is None:
        raise Unauthorized("the bearer token is unknown; check it, or ask an admin for a new one")
    if grant.revoked_at is not None:
        raise Unauthorized("the bearer token was revoked; create a new one (POST /api/v1/tokens)")
    expires_at = grant.expires_at
    if expires_at is not None and expires_at <= utcnow():
        raise Unauthorized(
            f"the bearer token expired at {expires_at.isoformat()}; create a new one (POST /api/v1/tokens)"
        )
    return Principal(
        username=grant.username,
        role=grant.role,
        scopes=with_admin_powers(implied(grant.scopes) & allowed_for_role(grant.role)),
        token_id=grant.id,
    )


class TokenCache:
    """Verified token hashes → principals, for ``TOKEN_CACHE_S`` (less when the token
    expires sooner); bounded in size. This process forgets a revoked token at once
    (``forget``); other API processes within ``TOKEN_CACHE_S``."""

    def __init__(self, ttl_s: float = TOKEN_CACHE_S, max_entries: int = 10_000) -> None:
        self._ttl_s = ttl_s
        self._max = max_entries
        self._entries: dict[str, tuple[float, Principal]] = {}

    def get(self, digest: str) -> Principal | None:
        entry = self._entries.get(digest)
        if entry is None or entry[0] < time.monotonic():
            self._entries.pop(digest, None)
            return None
        return entry[1]

    def put(self, digest: str, principal: Principal, expires_at: datetime | None = None) -> None:
        if len(self._entries) >= self._max:
            self._entries.clear()  # crude but bounded: a flood of tokens cannot grow memory
        ttl_s = self._ttl_s
        if expires_at is not None:
            ttl_s = min(ttl_s, (expires_at - utcnow()).total_seconds())
        self._entries[digest] = (time.monotonic() + ttl_s, principal)

    def forget(self, digests: list[str] | None = None) -> None:
        """Drop these tokens (revoked), or every token (a user deleted or demoted)."""
        if digests is None:
            self._entries.clear()
        for digest in digests or []:
            self._entries.pop(digest, None)


async def token_cache(request: Request) -> TokenCache:
    cache: TokenCache = request.app.state.token_cache
    return cache


AuthenticatedPrincipal = Annotated[Principal, Depends(current_principal)]
Tokens = Annotated[TokenCache, Depends(token_cache)]
