"""The tenants slice's SQL: users, groups and their members, tokens, the audit log.

Each change is one transaction. Nothing here decides what a missing or taken name means
to a caller: a change reports what it found (``False``, ``None``, a ``MemberChange``) and
the routes word the refusal. ``owner`` arguments scope a token call to one user's tokens
(None: an admin, every token).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from shared.db.pool import Connection, Database
from shared.db.queries import Queries

SQL = Queries(Path(__file__).parent / "sql")

Role = Literal["user", "admin"]  # api.users' CHECK
# What adding or removing a group member found.
MemberChange = Literal["done", "unchanged", "no-group", "no-user"]


@dataclass(frozen=True, slots=True)
class UserRow:
    name: str
    role: Role
    display_name: str
    created_at: datetime
    created_by: str
    groups: list[str]


@dataclass(frozen=True, slots=True)
class GroupRow:
    name: str
    description: str
    created_at: datetime
    created_by: str
    members: list[str]
    virtual_clusters: list[str]  # those whose access list names the group


@dataclass(frozen=True, slots=True)
class TokenRow:
    id: str
    name: str
    username: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    created_by: str


@dataclass(frozen=True, slots=True)
class TokenGrant:
    """A token as verification reads it: with its user's role as it is now."""

    id: str
    username: str
    scopes: list[str]
    expires_at: datetime | None
    revoked_at: datetime | None
    role: str


@dataclass(frozen=True, slots=True)
class AuditRow:
    id: int
    at: datetime
    username: str | None
    token_id: str | None
    method: str
    route: str
    target: str | None
    status: int
    client: str | None


class TenantRepository:
    def __init__(self, db: Database) -> None:
        self.db = db

    # --- users -------------------------------------------------------------------------

    async def create_user(self, name: str, role: str, display_name: str, by: str) -> bool:
        """False when the name is taken."""
        return await self.db.fetchval(SQL.insert_user, name, role, display_name, by) is not None

    async def users(self, name: str | None = None) -> list[UserRow]:
        return [UserRow(**r) for r in await self.db.fetch(SQL.list_users, name)]

    async def set_role(self, name: str, role: str) -> bool:
        """False when there is no such user."""
        return await self.db.fetchval(SQL.set_user_role, name, role) is not None

    async def delete_user(self, name: str) -> bool:
        """Its tokens and group memberships go with it; its jobs keep its name. False when
        there is no such user."""
        return await self.db.fetchval(SQL.delete_user, name) is not None

    # --- groups ------------------------------------------------------------------------

    async def create_group(self, name: str, description: str, by: str) -> bool:
        """False when the name is taken."""
        return await self.db.fetchval(SQL.insert_group, name, description, by) is not None

    async def groups(self, name: str | None = None) -> list[GroupRow]:
        return [GroupRow(**r) for r in await self.db.fetch(SQL.list_groups, name)]

    async def delete_group(self, name: str, by: str) -> bool:
        """Members leave it and every VC access list drops it (a list left empty admits
        admins only: deleting a group never opens a VC). False when there is no such group."""
        async with self.db.transaction() as conn:
            if await conn.fetchval(SQL.lock_group, name) is None:
                return False
            await conn.execute(SQL.drop_group_from_vcs, name, by)
            await conn.execute(SQL.delete_group, name)
        return True

    async def add_member(self, group: str, username: str, by: str) -> MemberChange:
        """``unchanged``: already a member."""
        async with self.db.transaction() as conn:
            missing = await self._missing(conn, group, username)
            if missing is not None:
                return missing
            added = await conn.fetchval(SQL.add_member, group, username, by)
        return "done" if added is not None else "unchanged"

    async def remove_member(self, group: str, username: str) -> MemberChange:
        """``unchanged``: not a member."""
        async with self.db.transaction() as conn:
            missing = await self._missing(conn, group, username)
            if missing is not None:
                return missing
            removed = await conn.fetchval(SQL.remove_member, group, username)
        return "done" if removed is not None else "unchanged"

    @staticmethod
    async def _missing(conn: Connection, group: str, username: str) -> MemberChange | None:
        if await conn.fetchval(SQL.group_exists, group) is None:
            return "no-group"
        if await conn.fetchval(SQL.user_exists, username) is None:
            return "no-user"
        return None

    async def usable_vcs(self, username: str | None) -> list[str]:
        """The VCs a user may see and submit to, by name (None: an admin, every VC)."""
        return [str(r["name"]) for r in await self.db.fetch(SQL.usable_vcs, username)]

    # --- tokens ------------------------------------------------------------------------

    async def create_token(
        self,
        token_id: str,
        username: str,
        name: str,
        sha256: str,
        scopes: Sequence[str],
        expires_at: datetime,
        by: str,
    ) -> TokenRow | None:
        """None when there is no such user."""
        async with self.db.transaction() as conn:
            if await conn.fetchval(SQL.user_exists, username) is None:
                return None
            row = await conn.fetchrow(
                SQL.insert_token, token_id, name, sha256, username, list(scopes), expires_at, by
            )
        assert row is not None
        return TokenRow(**row)

    async def upsert_token(
        self, token_id: str, name: str, sha256: str, username: str, role: str, scopes: Sequence[str]
    ) -> None:
        """A token made outside the API (the bootstrap admin's; tests'), without expiry; its
        user gets ``role``."""
        async with self.db.transaction() as conn:
            await conn.execute(SQL.upsert_user, username, role)
            await conn.execute(SQL.upsert_token, token_id, name, sha256, username, list(scopes))

    async def tokens(self, owner: str | None, limit: int) -> list[TokenRow]:
        return [TokenRow(**r) for r in await self.db.fetch(SQL.list_tokens, owner, limit)]

    async def token_by_hash(self, sha256: str) -> TokenGrant | None:
        row = await self.db.fetchrow(SQL.token_by_hash, sha256)
        return TokenGrant(**row) if row is not None else None

    async def revoke_token(self, token_id: str, owner: str | None) -> str | None:
        """Revoke a token (again is harmless); its hash, for the token cache. None when
        there is no such token (of ``owner``'s)."""
        digest = await self.db.fetchval(SQL.revoke_token, token_id, owner)
        return None if digest is None else str(digest)

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
        # every mutating call pays this.
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
    ) -> list[AuditRow]:
        rows = await self.db.fetch(
            SQL.list_audit, before, username, target, method, route, since, until, min_status, limit
        )
        return [AuditRow(**r) for r in rows]
