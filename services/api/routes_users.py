"""``/api/v1/users`` (admins) and ``/api/v1/whoami`` (everyone).

A user is a name and a role: ``user`` or ``admin``. Users hold tokens
(``routes_tokens.py``) and belong to groups (``routes_groups.py``); groups open VCs.
Deleting a user deletes their tokens and memberships at once (the token cache may serve
a deleted user's token a few more seconds on other API processes); their jobs keep their
name. ``whoami`` tells a token's holder who they are, what this token may do and which
VCs they may use, so a CLI can say so before a submit is refused.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from services.api.auth import SCOPE_ORDER, AuthenticatedPrincipal, TokenCache
from services.api.deps import require_admin
from services.api.tenant_repository import TenantRepository
from shared.errors import InvalidInput
from shared.jobs import NAME_PATTERN

router = APIRouter(prefix="/api/v1", tags=["users and groups"])
UserName = Annotated[str, Path(pattern=NAME_PATTERN, description="a user's name, e.g. alice")]
Role = Literal["user", "admin"]
_PRINTABLE = r"^[^\x00-\x1f\x7f]*$"


class UserSpec(BaseModel):
    """What ``POST /api/v1/users`` takes."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"name": "alice", "display_name": "Alice Liddell"}]}
    )

    name: str = Field(pattern=NAME_PATTERN, description="lower-case, as in job listings")
    role: Role = "user"
    display_name: str = Field(default="", max_length=200, pattern=_PRINTABLE)


class UserChange(BaseModel):
    """What ``PATCH /api/v1/users/{name}`` takes."""

    model_config = ConfigDict(extra="forbid")

    role: Role


class UserView(BaseModel):
    name: str
    role: Role
    display_name: str
    groups: list[str]
    created_at: datetime
    created_by: str


class UserList(BaseModel):
    items: list[UserView]


class WhoAmI(BaseModel):
    user: str
    role: Role
    is_admin: bool = Field(description="whether this token acts as an admin (admin user, admin scope)")
    scopes: list[str] = Field(description="what this token may do")
    token_id: str | None
    groups: list[str]
    virtual_clusters: list[str] = Field(description="the VCs you may see and submit to")


def _repo(request: Request) -> TenantRepository:
    return TenantRepository(request.app.state.repo.db)


def _view(row: dict[str, Any]) -> UserView:
    return UserView.model_validate(row)


@router.get("/whoami", operation_id="whoAmI", response_model=WhoAmI)
async def who_am_i(request: Request, principal: AuthenticatedPrincipal) -> WhoAmI:
    """Who this token acts for, with which scopes, in which groups, on which VCs."""
    repo = _repo(request)
    user = await repo.user(principal.username)
    if principal.is_admin:
        vcs = [str(r["name"]) for r in await request.app.state.repo.list_vcs(None, None)]
    else:
        vcs = await repo.usable_vcs(principal.username)
    return WhoAmI(
        user=principal.username,
        role=user["role"],
        is_admin=principal.is_admin,
        scopes=[s for s in SCOPE_ORDER if s in principal.scopes],
        token_id=principal.token_id,
        groups=user["groups"],
        virtual_clusters=vcs,
    )


@router.post("/users", status_code=201, operation_id="createUser", response_model=UserView)
async def create_user(spec: UserSpec, request: Request, principal: AuthenticatedPrincipal) -> UserView:
    """Add a user (admin); give them a token with ``POST /api/v1/tokens`` and ``user``."""
    require_admin(principal, "create users")
    row = await _repo(request).create_user(spec.name, spec.role, spec.display_name, principal.username)
    return _view(row)


@router.get("/users", operation_id="listUsers", response_model=UserList)
async def list_users(request: Request, principal: AuthenticatedPrincipal) -> UserList:
    require_admin(principal, "list users")
    return UserList(items=[_view(r) for r in await _repo(request).users()])


@router.get("/users/{name}", operation_id="getUser", response_model=UserView)
async def get_user(name: UserName, request: Request, principal: AuthenticatedPrincipal) -> UserView:
    require_admin(principal, "read users")
    return _view(await _repo(request).user(name))


@router.patch("/users/{name}", operation_id="updateUser", response_model=UserView)
async def update_user(
    name: UserName, change: UserChange, request: Request, principal: AuthenticatedPrincipal
) -> UserView:
    """Make a user an admin, or no longer one (their tokens follow within seconds)."""
    require_admin(principal, "change users' roles")
    if name == principal.username and change.role != "admin":
        raise InvalidInput("you cannot take away your own admin role; ask another admin")
    repo = _repo(request)
    await repo.set_role(name, change.role)
    _forget_tokens(request)
    return _view(await repo.user(name))


@router.delete("/users/{name}", status_code=204, operation_id="deleteUser")
async def delete_user(name: UserName, request: Request, principal: AuthenticatedPrincipal) -> Response:
    """Delete a user with their tokens and memberships; their jobs keep their name."""
    require_admin(principal, "delete users")
    if name == principal.username:
        raise InvalidInput("you cannot delete yourself; ask another admin")
    await _repo(request).delete_user(name)
    _forget_tokens(request)
    return Response(status_code=204)


def _forget_tokens(request: Request) -> None:
    """A role change or a deletion concerns every token of the user: this process forgets
    every verified token (each is verified again on its next use)."""
    cache: TokenCache = request.app.state.token_cache
    cache.forget()
