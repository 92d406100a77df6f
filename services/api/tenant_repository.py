"""The API's SQL for tenants: users, groups and their members, tokens, the audit log.

Each change is one transaction. Names that are not found raise ``NotFound`` with what to
do; names that are taken raise ``Conflict``. ``owner`` arguments scope a token call to one
user's tokens (None: an admin, every token); someone else's token is not found.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from services.api.repository import SQL
from shared.db.pool import Connection, Database
from shared.errors import Conflict, InvalidInput, NotFound


def new_token_id() -> str:
    return f"tok-{secrets.token_hex(10)}"


def _no_user(name: str) -> NotFound:
    return NotFound(f"no user named {name!r}; list them with GET /api/v1/users")


def _no_group(name: str) -> NotFound:
    return NotFound(f"no group named {name!r}; list them with GET /api/v1/groups")


class TenantRepository:
    def __init__(self, db: Database) -> None:
        self.db = db

    # --- users -------------------------------------------------------------------------

    async def create_user(self, name: str, role: str, display_name: str, by: str) -> dict[str, Any]:
        async with self.db.transaction() as conn:
            if await conn.fetchval(SQL.insert_user, name, role, display_name, by) is None:
                raise Conflict(f"a user named {name!r} already exists; pick another name")
        return await self.user(name)

    async def users(self, name: str | None = None) -> list[dict[str, Any]]:
        return [dict(r) for r in await self.db.fetch(SQL.list_users, name)]

    async def user(self, name: str) -> dict[str, Any]:
        rows = await self.users(name)
        if not rows:
            raise _no_user(name)
        return rows[0]

    async def set_role(self, name: str, role: str) -> None:
        async with self.db.transaction() as conn:
            if await conn.fetchval(SQL.set_user_role, name, role) is None:
                raise _no_user(name)

    async def delete_user(self, name: str) -> None:
        """Its tokens and group memberships go with it; its jobs keep its name."""
        async with self.db.transaction() as conn:
            if await conn.fetchval(SQL.delete_user, name) is None:
                raise _no_user(name)

    # --- groups ------------------------------------------------------------------------

    async def create_group(self, name: str, description: str, by: str) -> dict[str, Any]:
        async with self.db.transaction() as conn:
            if await conn.fetchval(SQL.insert_group, name, description, by) is None:
                raise Conflict(f"a group named {name!r} already exists; pick another name")
        return await self.group(name)

    async def groups(self, name: str | None = None) -> list[dict[str, Any]]:
        return [dict(r) for r in await self.db.fetch(SQL.list_groups, name)]

    async def group(self, name: str) -> dict[str, Any]:
        rows = await self.groups(name)
        if not rows:
            raise _no_group(name)
        return rows[0]

    async def delete_group(self, name: str, by: str) -> None:
        """Members leave it and every VC access list drops it (a list left empty admits
        admins only: deleting a group never opens a VC)."""
        async with self.db.transaction() as conn:
            if await conn.fetchval(SQL.lock_group, name) is None:
                raise _no_group(name)
            await conn.execute(SQL.drop_group_from_vcs, name, by)
            await conn.execute(SQL.delete_group, name)

    async def add_member(self, group: str, username: str, by: str) -> bool:
        """True when added, False when already a member."""
        async with self.db.transaction() as conn:
            await self._check_both(conn, group, username)
            return await conn.fetchval(SQL.add_member, group, username, by) is not None

    async def remove_member(self, group: str, username: str) -> None:
        async with self.db.transaction() as conn:
            await self._check_both(conn, group, username)
            if await conn.fetchval(SQL.remove_member, group, username) is None:
                raise NotFound(f"{username!r} is not a member of group {group!r}")

    @staticmethod
    async def _check_both(conn: Connection, group: str, username: str) -> None:
        if await conn.fetchval(SQL.group_exists, group) is None:
            raise _no_group(group)
        if await conn.fetchval(SQL.user_exists, username) is None:
            raise _no_user(username)

    async def usable_vcs(self, username: str) -> list[str]:
        return [str(r["name"]) for r in await self.db.fetch(SQL.usable_vcs, username)]

    # --- tokens ------------------------------------------------------------------------

    async def create_token(
        self,
        username: str,
        name: str,
        sha256: str,
        scopes: Sequence[str],
        expires_at: datetime,
        by: str,
    ) -> dict[str, Any]:
        async with self.db.transaction() as conn:
            if await conn.fetchval(SQL.user_exists, username) is None:
                raise InvalidInput(f"no user named {username!r}; create the user first (POST /api/v1/users)")
            row = await conn.fetchrow(
                SQL.insert_token, new_token_id(), name, sha256, username, list(scopes), expires_at, by
            )
        assert row is not None
        return dict(row)

    async def tokens(self, owner: str | None, limit: int) -> list[dict[str, Any]]:
        return [dict(r) for r in await self.db.fetch(SQL.list_tokens, owner, limit)]

    async def revoke_token(self, token_id: str, owner: str | None) -> str:
        """Revoke a token (again is harmless); its hash, for the token cache."""
        async with self.db.transaction() as conn:
            digest = await conn.fetchval(SQL.revoke_token, token_id, owner)
        if digest is None:
            raise NotFound(f"no token with id {token_id!r}; list yours with GET /api/v1/tokens")
        return str(digest)

    # --- audit log ---------------------------------------------------------------------

    async def record_audit(
        self,
        username: str | None,
        token_id: str | None,
        method: str,
        route: str,
        target: str | None,
        status: int,
        client: str | None,
    ) -> None:
        # One statement, so no BEGIN/COMMIT around it: alone it commits as atomically, and
        # every mutating call pays this (two round trips of four, on the submit path).
        await self.db.execute(SQL.insert_audit, username, token_id, method, route, target, status, client)

    async def forget_old_audit(self, retention_s: float, batch: int = 10_000) -> int:
        """Delete the rows older than ``retention_s``, a batch per statement; how many went."""
        return await self.db.delete_in_batches(SQL.forget_old_audit, retention_s, batch=batch)

    async def audit(
        self,
        before: int | None,
        username: str | None,
        target: str | None,
        method: str | None,
        route: str | None,
        since: datetime | None,
        until: datetime | None,
        min_status: int | None,
        limit: int,
    ) -> list[dict[str, Any]]:
        rows = await self.db.fetch(
            SQL.list_audit, before, username, target, method, route, since, until, min_status, limit
        )
        return [dict(r) for r in rows]
