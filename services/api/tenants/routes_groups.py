"""``/api/v1/groups`` (admins): groups of users, and their members.

A group is what a VC's access list names (``cluster/routes_vcs.py``): its members may
see and submit to the VC. Deleting a group takes it off every access list in the same
transaction; a list left empty admits admins only, so deleting a group never opens a VC.
Membership changes take effect on the next request (access is checked in Postgres, not
cached).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from services.api.tenants import lookups
from services.api.tenants.auth import AuthenticatedPrincipal, require_admin
from services.api.tenants.dependencies import TenantsRepo
from services.api.tenants.repository import GroupRow
from shared.errors import Conflict, NotFound
from shared.jobs import NAME_PATTERN

router = APIRouter(prefix="/api/v1/groups", tags=["users and groups"])
GroupName = Annotated[str, Path(pattern=NAME_PATTERN, description="a group's name, e.g. vision")]
UserName = Annotated[str, Path(pattern=NAME_PATTERN, description="a user's name, e.g. alice")]


class GroupSpec(BaseModel):
    """What ``POST /api/v1/groups`` takes."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"name": "vision", "description": "CV team"}]}
    )

    name: str = Field(pattern=NAME_PATTERN, description="lower-case letters, digits, - and _")
    description: str = Field(default="", max_length=500, pattern=r"^[^\x00-\x1f\x7f]*$")


class GroupView(BaseModel):
    name: str
    description: str
    members: list[str]
    virtual_clusters: list[str] = Field(description="VCs whose access list names this group")
    created_at: datetime
    created_by: str


class GroupList(BaseModel):
    items: list[GroupView]


def _view(row: GroupRow) -> GroupView:
    return GroupView.model_validate(row, from_attributes=True)


@router.post(
    "",
    status_code=201,
    operation_id="createGroup",
    response_model=GroupView,
    responses={409: {"description": "a group of this name exists already"}},
)
async def create_group(spec: GroupSpec, principal: AuthenticatedPrincipal, repo: TenantsRepo) -> GroupView:
    require_admin(principal, "create groups")
    if not await repo.create_group(spec.name, spec.description, principal.username):
        raise Conflict(f"a group named {spec.name!r} already exists; pick another name")
    return _view(await lookups.group(repo, spec.name))


@router.get("", operation_id="listGroups", response_model=GroupList)
async def list_groups(principal: AuthenticatedPrincipal, repo: TenantsRepo) -> GroupList:
    require_admin(principal, "list groups")
    return GroupList(items=[_view(r) for r in await repo.groups()])


@router.get("/{name}", operation_id="getGroup", response_model=GroupView)
async def get_group(name: GroupName, principal: AuthenticatedPrincipal, repo: TenantsRepo) -> GroupView:
    require_admin(principal, "read groups")
    return _view(await lookups.group(repo, name))


@router.delete("/{name}", status_code=204, operation_id="deleteGroup")
async def delete_group(name: GroupName, principal: AuthenticatedPrincipal, repo: TenantsRepo) -> Response:
    """Delete a group: its members leave it and every VC access list drops it."""
    require_admin(principal, "delete groups")
    if not await repo.delete_group(name, principal.username):
        raise lookups.no_group(name)
    return Response(status_code=204)


@router.put("/{name}/members/{username}", operation_id="addGroupMember", response_model=GroupView)
async def add_member(
    name: GroupName, username: UserName, principal: AuthenticatedPrincipal, repo: TenantsRepo
) -> GroupView:
    """Add a user to a group (again is harmless)."""
    require_admin(principal, "change group members")
    lookups.check_member_change(await repo.add_member(name, username, principal.username), name, username)
    return _view(await lookups.group(repo, name))


@router.delete("/{name}/members/{username}", status_code=204, operation_id="removeGroupMember")
async def remove_member(
    name: GroupName, username: UserName, principal: AuthenticatedPrincipal, repo: TenantsRepo
) -> Response:
    require_admin(principal, "change group members")
    change = await repo.remove_member(name, username)
    lookups.check_member_change(change, name, username)
    if change == "unchanged":
        raise NotFound(f"{username!r} is not a member of group {name!r}")
    return Response(status_code=204)
