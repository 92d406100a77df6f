"""Bearer tokens: stored as SHA-256 hashes, never in the clear.

The bootstrap admin token is generated on first start into ``$CORRAL_HOME/admin-token``
(mode 0600) and its hash upserted, so a fresh ``make up`` prints a token that works and
a second one keeps it. Tokens are high-entropy random strings, so a plain SHA-256 (not
a slow password hash) is the right way to store them: it makes lookup one indexed read.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request

from services.api.repository import ApiRepository
from shared.errors import Unauthorized

# A verified token is trusted for this long without asking Postgres again; revoking a
# token therefore takes effect within this many seconds.
TOKEN_CACHE_S = 5.0
TOKEN_PREFIX = "crl_"  # noqa: S105  # a prefix that makes leaked tokens greppable, not a secret


@dataclass(frozen=True)
class Principal:
    username: str
    role: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def load_or_create_admin_token(path: Path) -> str:
    if path.exists():
        token = path.read_text().strip()
        if token:
            return token
    path.parent.mkdir(parents=True, exist_ok=True)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token


async def bootstrap_admin(repo: ApiRepository, path: Path) -> None:
    token = load_or_create_admin_token(path)
    await repo.upsert_token("tok-admin-bootstrap", "bootstrap admin", hash_token(token), "admin", "admin")


async def current_principal(request: Request) -> Principal:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(
            "missing bearer token: send 'Authorization: Bearer <token>' "
            "(the admin token is in $CORRAL_HOME/admin-token)"
        )
    cache: TokenCache = request.app.state.token_cache
    digest = hash_token(token.strip())
    principal = cache.get(digest)
    if principal is None:
        repo: ApiRepository = request.app.state.repo
        row = await repo.token_by_hash(digest)
        if row is None:
            raise Unauthorized("the bearer token is unknown or revoked")
        principal = Principal(username=row["username"], role=row["role"])
        cache.put(digest, principal)
    return principal


class TokenCache:
    """Verified token hashes → principals, for ``TOKEN_CACHE_S``; bounded in size."""

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

    def put(self, digest: str, principal: Principal) -> None:
        if len(self._entries) >= self._max:
            self._entries.clear()  # crude but bounded: a flood of tokens cannot grow memory
        self._entries[digest] = (time.monotonic() + self._ttl_s, principal)


AuthenticatedPrincipal = Annotated[Principal, Depends(current_principal)]
