"""What a name of the tenants slice that is not there means to the caller.

A user or group named but not found is a 404 that says how to list them, worded once
here for every route that looks one up; the repository only reports what it found.
"""

from __future__ import annotations

from services.api.tenants.repository import GroupRow, MemberChange, TenantRepository, UserRow
from shared.errors import NotFound


def no_user(name: str) -> NotFound:
    return NotFound(f"no user named {name!r}; list them with GET /api/v1/users")


def no_group(name: str) -> NotFound:
    return NotFound(f"no group named {name!r}; list them with GET /api/v1/groups")


async def user(repo: TenantRepository, name: str) -> UserRow:
    rows = await repo.users(name)
    if not rows:
        raise no_user(name)
    return rows[0]


async def group(repo: TenantRepository, name: str) -> GroupRow:
    rows = await repo.groups(name)
    if not rows:
        raise no_group(name)
    return rows[0]


def check_member_change(change: MemberChange, group: str, username: str) -> None:
    """Raise for a membership change whose group or user does not exist."""
    if change == "no-group":
        raise no_group(group)
    if change == "no-user":
        raise no_user(username)
