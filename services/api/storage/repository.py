"""The storage slice's SQL: storage configs and the groups that may use each.

A change is one transaction; nothing here decides what a missing name means to a caller
(the routes word the refusal). Who may use a config at submit is read by the jobs slice
with its own query (``services/api/jobs/storage_access.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from shared.db.pool import Database
from shared.db.queries import Queries

SQL = Queries(Path(__file__).parent / "sql")


@dataclass(frozen=True, slots=True)
class StorageRow:
    name: str
    kind: str
    source: str
    read_only: bool
    all_users: bool
    description: str
    groups: list[str]
    created_at: datetime
    created_by: str
    updated_at: datetime
    updated_by: str


@dataclass(frozen=True, slots=True)
class StorageWrite:
    """What a put did: ``created`` (or changed), or nothing for ``missing_groups``."""

    created: bool = False
    missing_groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NewStorage:
    name: str
    kind: str
    source: str
    read_only: bool
    all_users: bool
    description: str
    groups: list[str]


class StorageRepository:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def configs(self, name: str | None = None) -> list[StorageRow]:
        return [StorageRow(**r) for r in await self.db.fetch(SQL.list_storage, name)]

    async def put(self, config: NewStorage, by: str) -> StorageWrite:
        """Create or replace a config and its groups, at once; nothing is written when a
        group does not exist."""
        async with self.db.transaction() as conn:
            missing = [r["n"] for r in await conn.fetch(SQL.missing_groups, config.groups)]
            if missing:
                return StorageWrite(missing_groups=tuple(missing))
            created = await conn.fetchval(
                SQL.upsert_storage,
                config.name,
                config.kind,
                config.source,
                config.read_only,
                config.all_users,
                config.description,
                by,
            )
            await conn.execute(SQL.clear_storage_groups, config.name)
            await conn.execute(SQL.add_storage_groups, config.name, config.groups)
        return StorageWrite(created=bool(created))

    async def delete(self, name: str) -> bool:
        """False when there is no such config. Jobs that name it keep their specs; their
        tasks started after this fail to start (the node finds no config)."""
        return await self.db.fetchval(SQL.delete_storage, name) is not None
