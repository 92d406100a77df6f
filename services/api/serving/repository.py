"""The serving slice's SQL for services and their replicas (``api.services``,
``api.service_replicas``, migration 0033), and the reads of each replica's job and latest
attempt that a service's status and the controller decide on.

Nothing here decides: what a service's state is (``status.py``), what the controller
does about it (``controller.py``), who may see it (``routes.py``). The gateway's own read
is ``endpoints.py``'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

from shared.db.pool import Connection, Database
from shared.db.queries import Queries
from shared.jobs import JobSpec

SQL = Queries(Path(__file__).parent / "sql")


@dataclass(frozen=True, slots=True)
class ServiceRow:
    name: str
    owner: str
    virtual_cluster: str
    revision: int
    spec: dict[str, Any]  # the current template: a kind: service JobSpec
    replicas: int  # desired
    public: bool
    deleting_at: datetime | None
    blocked_reason: str  # why no replica can be created now; '' while one can
    created_at: datetime
    updated_at: datetime

    @property
    def template(self) -> JobSpec:
        return JobSpec.model_validate(self.spec)


@dataclass(frozen=True, slots=True)
class ReplicaRow:
    """A replica: its job's state and its latest attempt's (None before the first)."""

    service: str
    job_id: str
    revision: int
    created_at: datetime
    draining_at: datetime | None
    drained_s: float | None  # since draining_at, by the database's clock
    job_state: str
    job_reason: str
    not_before: datetime | None
    cancel_requested_at: datetime | None
    retries: int
    restarts: int
    pending_detail: str | None
    attempt_state: str | None
    ready: bool
    ready_detail: str
    node_id: str | None


def _service(row: asyncpg.Record | None) -> ServiceRow | None:
    return None if row is None else ServiceRow(**row)


class ServiceWrites:
    """The statements of one transaction on its connection: a route's change, or one
    controller step for one service (``ServiceRepository.transaction``)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def insert_service(self, spec: JobSpec, owner: str) -> ServiceRow | None:
        """None when a service of that name exists."""
        assert spec.service is not None
        row = await self.conn.fetchrow(
            SQL.insert_service,
            spec.name,
            owner,
            spec.virtual_cluster,
            spec.model_dump(mode="json"),
            spec.service.replicas,
            spec.service.public,
        )
        return _service(row)

    async def lock_service(self, name: str) -> ServiceRow | None:
        return _service(await self.conn.fetchrow(SQL.lock_service, name))

    async def set_replicas(self, name: str, replicas: int, spec: JobSpec) -> None:
        await self.conn.execute(SQL.set_replicas, name, replicas, spec.model_dump(mode="json"))

    async def set_template(self, name: str, spec: JobSpec) -> int:
        """The new revision."""
        assert spec.service is not None
        revision = await self.conn.fetchval(
            SQL.set_template,
            name,
            spec.model_dump(mode="json"),
            spec.service.replicas,
            spec.service.public,
            spec.virtual_cluster,
        )
        return int(revision)

    async def mark_deleting(self, name: str) -> None:
        await self.conn.execute(SQL.mark_deleting, name)

    async def delete_service(self, name: str) -> None:
        await self.conn.execute(SQL.delete_service, name)

    async def replicas_of(self, name: str) -> list[ReplicaRow]:
        return [ReplicaRow(**row) for row in await self.conn.fetch(SQL.replicas_of, [name])]

    async def insert_replica(self, job_id: str, service: str, revision: int) -> None:
        await self.conn.execute(SQL.insert_replica, job_id, service, revision)

    async def mark_draining(self, job_id: str) -> None:
        await self.conn.execute(SQL.mark_draining, job_id)

    async def forget_replica(self, job_id: str) -> None:
        await self.conn.execute(SQL.forget_replica, job_id)

    async def service_names(self) -> dict[str, datetime]:
        """Every service, by name, with when a route last changed it."""
        return {row["name"]: row["updated_at"] for row in await self.conn.fetch(SQL.services_to_reconcile)}

    async def set_blocked_reason(self, name: str, reason: str) -> None:
        await self.conn.execute(SQL.set_blocked_reason, name, reason)

    async def owner_role(self, owner: str) -> str | None:
        """The owner's role now ('admin', 'user'); None once they are no user."""
        role: str | None = await self.conn.fetchval(SQL.owner_role, owner)
        return role


class ServiceRepository:
    def __init__(self, db: Database) -> None:
        self.db = db

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[ServiceWrites]:
        async with self.db.transaction() as conn:
            yield ServiceWrites(conn)

    async def owner_role(self, owner: str) -> str | None:
        """The owner's role now ('admin', 'user'); None once they are no user."""
        role: str | None = await self.db.fetchval(SQL.owner_role, owner)
        return role

    async def get_service(self, name: str) -> ServiceRow | None:
        return _service(await self.db.fetchrow(SQL.get_service, name))

    async def list_services(self, owner: str | None) -> list[ServiceRow]:
        """Every service of ``owner`` (None: everyone's), by name."""
        return [ServiceRow(**row) for row in await self.db.fetch(SQL.list_services, owner)]

    async def replicas_of(self, names: list[str]) -> dict[str, list[ReplicaRow]]:
        """The replicas of each service named, oldest first."""
        found: dict[str, list[ReplicaRow]] = {name: [] for name in names}
        for row in await self.db.fetch(SQL.replicas_of, names):
            found[row["service"]].append(ReplicaRow(**row))
        return found
