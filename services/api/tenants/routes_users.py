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
from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from services.api.tenants import lookups
from services.api.tenants.auth import ALL_SCOPES, AuthenticatedPrincipal, Tokens, require_admin
from services.api.tenants.dependencies import TenantsRepo
from services.api.tenants.repository import Role, UserRow
from shared.errors import Conflict
from shared.jobs import NAME_PATTERN

router = APIRouter(prefix="/api/v1", tags=["users and groups"])
UserName = Annotated[str, Path(pattern=NAME_PATTERN, description="a user's name, e.g. alice")]
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


def _view(row: UserRow) -> UserView:
    return UserView.model_validate(row, from_attributes=True)


@router.get("/whoami", operation_id="whoAmI", response_model=WhoAmI)
async def who_am_i(principal: AuthenticatedPrincipal, repo: TenantsRepo) -> WhoAmI:
    """Who this token acts for, with which scopes, in which groups, on which VCs."""
    user = await lookups.user(repo, principal.username)
    return WhoAmI(
        user=principal.username,
        role=user.role,
        is_admin=principal.is_admin,
        scopes=[s for s in ALL_SCOPES if s in principal.scopes],
        token_id=principal.token_id,
        groups=user.groups,
        virtual_clusters=await repo.usable_vcs(principal.vc_user),
    )


@router.post(
    "/users",
    status_code=201,
    operation_id="createUser",
    response_model=UserView,
    responses={409: {"description": "a user of this name exists already"}},
)
async def create_user(spec: UserSpec, principal: AuthenticatedPrincipal, repo: TenantsRepo) -> UserView:
    """Add a user (admin); give them a token with ``POST /api/v1/tokens`` and ``user``."""
    require_admin(principal, "create users")
    if not await repo.create_user(spec.name, spec.role, spec.display_name, principal.username):
        raise Conflict(f"a user named {spec.name!r} already exists; pick another name")
    return _view(await lookups.user(repo, spec.name))


@router.get("/users", operation_id="listUsers", response_model=UserList)
async def list_users(principal: AuthenticatedPrincipal, repo: TenantsRepo) -> UserList:
    require_admin(principal, "list users")
    return UserList(items=[_view(r) for r in await repo.users()])


@router.get("/users/{name}", operation_id="getUser", response_model=UserView)
async def get_user(name: UserName, principal: AuthenticatedPrincipal, repo: TenantsRepo) -> UserView:
    require_admin(principal, "read users")
    return _view(await lookups.user(repo, name))


@router.patch(
    "/users/{name}",
    operation_id="updateUser",
    response_model=UserView,
    responses={409: {"description": "an admin taking away their own admin role"}},
)
async def update_user(
    name: UserName, change: UserChange, principal: AuthenticatedPrincipal, repo: TenantsRepo, cache: Tokens
) -> UserView:
    """Make a user an admin, or no longer one (their tokens follow within seconds).

    An admin cannot take away their own admin role (409): another admin must, so that the
    cluster is never left without one by a slip."""
    require_admin(principal, "change users' roles")
    if name == principal.username and change.role != "admin":
        raise Conflict("you cannot take away your own admin role; ask another admin")
    if not await repo.set_role(name, change.role):
        raise lookups.no_user(name)
    # A role change concerns every token of the user: this process forgets every verified
    # token (each is verified again on its next use).
    cache.forget()
    return _view(await lookups.user(repo, name))


@router.delete(
    "/users/{name}",
    status_code=204,
    operation_id="deleteUser",
    responses={409: {"description": "an admin deleting their own user"}},
)
async def delete_user(
    name: UserName, principal: AuthenticatedPrincipal, repo: TenantsRepo, cache: Tokens
) -> Response:
    """Delete a user with their tokens and memberships; their jobs keep their name.

    An admin cannot delete their own user (409): another admin must."""
    require_admin(principal, "delete users")
    if name == principal.username:
        raise Conflict("you cannot delete yourself; ask another admin")
    if not await repo.delete_user(name):
        raise lookups.no_user(name)
    cache.forget()  # as for a role change
    return Response(status_code=204)
