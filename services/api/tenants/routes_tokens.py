"""``/api/v1/tokens``: a user's bearer tokens — create (the secret shown once), list, revoke.

Users manage their own tokens; admins list and revoke anyone's and may create one for
another user (how a new user gets their first token). A new token's scopes may not exceed
what its user may hold (``admin`` for admins only) nor, for your own tokens, what the
token making it carries: a ``submit`` token cannot mint an ``admin`` one, nor one
without ``exec`` an ``exec`` one. Every token
expires (default ``DEFAULT_TTL``, at most ``MAX_TTL``); only the bootstrap admin token,
kept in ``$CORRAL_HOME/admin-token``, does not.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from services.api.audit import set_audit_target
from services.api.tenants import lookups
from services.api.tenants.auth import (
    ALL_SCOPES,
    BOOTSTRAP_TOKEN_ID,
    TOKEN_PREFIX,
    AuthenticatedPrincipal,
    Scope,
    Tokens,
    allowed_for_role,
    hash_token,
    implied,
    require_admin,
)
from services.api.tenants.dependencies import TenantsRepo
from services.api.tenants.repository import TokenRow
from shared.clock import utcnow
from shared.errors import Conflict, Forbidden, InvalidInput, NotFound
from shared.jobs import NAME_PATTERN
from shared.request_types import Timestamp

router = APIRouter(prefix="/api/v1/tokens", tags=["tokens"])
TokenId = Annotated[str, Path(pattern=r"^tok-[0-9a-z-]{1,40}$", description="a token id, as listed")]
DEFAULT_TTL = timedelta(days=90)
MAX_TTL = timedelta(days=366)
_PRINTABLE = r"^[^\x00-\x1f\x7f]*$"


def _default_scopes() -> list[Scope]:
    return ["read", "submit"]


class TokenSpec(BaseModel):
    """What ``POST /api/v1/tokens`` takes."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"name": "laptop", "scopes": ["read", "submit"]}]},
    )

    name: str = Field(min_length=1, max_length=100, pattern=_PRINTABLE, description="what it is for")
    scopes: list[Scope] = Field(
        default_factory=_default_scopes,
        min_length=1,
        max_length=5,
        description="read, submit, admin: each implies those before it; exec (a shell, a port or a"
        " proxied page in a running task of yours) and serve (calling services through /serve/)"
        " only when asked for, or with admin",
    )
    expires_at: Timestamp | None = Field(
        default=None, description="when it stops working (default in 90 days; at most a year away)"
    )
    user: Annotated[str, Field(pattern=NAME_PATTERN)] | None = Field(
        default=None, description="whose token (admins only; default: yours)"
    )


class TokenView(BaseModel):
    id: str
    name: str
    user: str
    scopes: list[str]
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None
    active: bool = Field(description="neither revoked nor expired")

    @classmethod
    def from_row(cls, row: TokenRow) -> TokenView:
        active = row.revoked_at is None and (row.expires_at is None or row.expires_at > utcnow())
        return cls(
            id=row.id,
            name=row.name,
            user=row.username,
            scopes=row.scopes,
            created_at=row.created_at,
            created_by=row.created_by,
            expires_at=row.expires_at,
            revoked_at=row.revoked_at,
            active=active,
        )


class TokenCreated(TokenView):
    token: str = Field(description="the bearer token, shown this once: keep it")


class TokenList(BaseModel):
    items: list[TokenView]


def new_token_id() -> str:
    return f"tok-{secrets.token_hex(10)}"


@router.post(
    "",
    status_code=201,
    operation_id="createToken",
    response_model=TokenCreated,
    responses={
        404: {"description": "the user named does not exist"},
        422: {
            "description": "a field is wrong (`errors` names it), or `expires_at` is in the past or "
            "more than a year away"
        },
    },
)
async def create_token(
    spec: TokenSpec, request: Request, principal: AuthenticatedPrincipal, repo: TenantsRepo
) -> TokenCreated:
    """A new bearer token; the answer holds it, shown only now (Corral keeps its hash).

    It expires at ``expires_at``, which must be to come and at most a year away (422
    otherwise), or in 90 days by default."""
    owner = spec.user or principal.username
    if owner != principal.username:
        require_admin(principal, "create tokens for other users")
    wanted = implied(spec.scopes)
    role = principal.role if owner == principal.username else (await lookups.user(repo, owner)).role
    if beyond := wanted - allowed_for_role(role):
        raise Forbidden(f"user {owner!r} may not hold the {_names(beyond)} scope (only admins may)")
    if owner == principal.username and (beyond := wanted - principal.scopes):
        raise Forbidden(
            f"this token has the scopes {_names(principal.scopes)} and cannot make one with"
            f" {_names(beyond)}; use a token that has them"
        )
    now = utcnow()
    expires_at = spec.expires_at or now + DEFAULT_TTL
    if expires_at <= now:
        raise InvalidInput(f"expires_at {expires_at.isoformat()} is in the past; give a time to come")
    if expires_at > now + MAX_TTL:
        raise InvalidInput("expires_at is more than a year away; tokens live a year at most")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    scopes = [s for s in ALL_SCOPES if s in wanted]
    by = principal.username
    row = await repo.create_token(
        new_token_id(), owner, spec.name, hash_token(secret), scopes, expires_at, by
    )
    if row is None:
        raise InvalidInput(f"no user named {owner!r}; create the user first (POST /api/v1/users)")
    set_audit_target(request, row.id)
    return TokenCreated(**TokenView.from_row(row).model_dump(), token=secret)


@router.get("", operation_id="listTokens", response_model=TokenList)
async def list_tokens(
    principal: AuthenticatedPrincipal,
    repo: TenantsRepo,
    user: Annotated[str | None, Query(pattern=NAME_PATTERN, description="one user's (admins)")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> TokenList:
    """Newest first, revoked and expired ones included (yours; everyone's for admins).
    Secrets are never shown again."""
    owner = user if principal.is_admin else principal.username
    rows = await repo.tokens(owner, limit)
    return TokenList(items=[TokenView.from_row(r) for r in rows])


@router.delete(
    "/{token_id}",
    status_code=204,
    operation_id="revokeToken",
    responses={409: {"description": "the bootstrap admin token, which only a restart replaces"}},
)
async def revoke_token(
    token_id: TokenId, principal: AuthenticatedPrincipal, repo: TenantsRepo, cache: Tokens
) -> Response:
    """Revoke a token: it stops working at once on this API process, within seconds on the
    others. Revoking it again is harmless. The bootstrap admin token cannot be revoked
    here (409): it comes back at every start."""
    if token_id == BOOTSTRAP_TOKEN_ID:
        raise Conflict(
            "the bootstrap admin token comes back at every start; to replace it, delete"
            " $CORRAL_HOME/admin-token and restart the API"
        )
    digest = await repo.revoke_token(token_id, None if principal.is_admin else principal.username)
    if digest is None:
        raise NotFound(f"no token with id {token_id!r}; list yours with GET /api/v1/tokens")
    cache.forget([digest])
    return Response(status_code=204)


def _names(scopes: frozenset[Scope]) -> str:
    return ", ".join(s for s in ALL_SCOPES if s in scopes)
