"""``/api/v1/groups`` (admins): groups of users, and their members.

A group is what a VC's access list names (``routes_vcs.py``): its members may see and
submit to the VC. Deleting a group takes it off every access list in the same
transaction; a list left empty admits admins only, so deleting a group never opens a VC.
Membership changes take effect on the next request (access is checked in Postgres, not
cached).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from services.api.auth import AuthenticatedPrincipal
from services.api.deps import require_admin
from services.api.tenant_repository import TenantRepository
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


def _repo(request: Request) -> TenantRepository:
    return TenantRepository(request.app.state.repo.db)


@router.post("", status_code=201, operation_id="createGroup", response_model=GroupView)
async def create_group(spec: GroupSpec, request: Request, principal: AuthenticatedPrincipal) -> GroupView:
    require_admin(principal, "create groups")
    row = await _repo(request).create_group(spec.name, spec.description, principal.username)
    return GroupView.model_validate(row)


@router.get("", operation_id="listGroups", response_model=GroupList)
async def list_groups(request: Request, principal: AuthenticatedPrincipal) -> GroupList:
    require_admin(principal, "list groups")
    return GroupList(items=[GroupView.model_validate(r) for r in await _repo(request).groups()])


@router.get("/{name}", operation_id="getGroup", response_model=GroupView)
async def get_group(name: GroupName, request: Request, principal: AuthenticatedPrincipal) -> GroupView:
    require_admin(principal, "read groups")
    return GroupView.model_validate(await _repo(request).group(name))


@router.delete("/{name}", status_code=204, operation_id="deleteGroup")
async def delete_group(name: GroupName, request: Request, principal: AuthenticatedPrincipal) -> Response:
    """Delete a group: its members leave it and every VC access list drops it."""
    require_admin(principal, "delete groups")
    await _repo(request).delete_group(name, principal.username)
    return Response(status_code=204)


@router.put("/{name}/members/{username}", operation_id="addGroupMember", response_model=GroupView)
async def add_member(
    name: GroupName, username: UserName, request: Request, principal: AuthenticatedPrincipal
) -> GroupView:
    """Add a user to a group (again is harmless)."""
    require_admin(principal, "change group members")
    repo = _repo(request)
    await repo.add_member(name, username, principal.username)
    return GroupView.model_validate(await repo.group(name))


@router.delete("/{name}/members/{username}", status_code=204, operation_id="removeGroupMember")
async def remove_member(
    name: GroupName, username: UserName, request: Request, principal: AuthenticatedPrincipal
) -> Response:
    require_admin(principal, "change group members")
    await _repo(request).remove_member(name, username)
    return Response(status_code=204)
