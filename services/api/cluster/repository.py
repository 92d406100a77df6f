"""The cluster slice's SQL: nodes, GPUs, their health and history (the monitor's tables,
read for queries), service instances, VC definitions (the API's own table), and node
membership (join tokens, bus credentials, node secrets).

Requests for the service that owns an entity (a drain, for the monitor) are events in
the outbox (``append_event``): the API changes nothing of another service's. Nothing
here decides; a change reports what it found and the routes word the refusal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from shared.db.credentials import mint_node_credential, revoke_node_credential
from shared.db.pool import Connection, Database
from shared.db.queries import Queries
from shared.events import Event
from shared.outbox import append

SQL = Queries(Path(__file__).parent / "sql")


@dataclass(frozen=True, slots=True)
class NodeRow:
    id: str
    hostname: str
    simulated: bool
    state: str
    gpu_count: int
    expected_gpus: int
    last_heartbeat: datetime
    drained_at: datetime | None
    drain_reason: str | None
    drained_by: str | None
    drain_evicts: bool
    rack: str
    lost_gpus: int
    gpus_in_use: int
    isolation: str
    isolation_detail: str
    cpu_sharing: str | None


@dataclass(frozen=True, slots=True)
class GpuRow:
    node_id: str
    index: int
    uuid: str
    model: str
    memory_total_mb: int
    memory_used_mb: int | None
    utilization_pct: float | None
    memory_utilization_pct: float | None
    temperature_c: float | None
    power_w: float | None
    sm_clock_mhz: int | None
    throttle_reasons: list[str] | None
    ecc_corrected_volatile: int | None
    ecc_uncorrected_volatile: int | None
    remapped_rows_pending: bool | None
    remap_failure: bool | None
    last_xid: int | None
    lost: bool
    unsupported: list[str]
    job_id: str | None
    task: str | None
    updated_at: datetime
    nvlink_domain: int


@dataclass(frozen=True, slots=True)
class HealthEventRow:
    at: datetime
    kind: str
    gpu_index: int | None
    condition: str
    action: str
    detail: str
    actor: str


@dataclass(frozen=True, slots=True)
class HistoryRow:
    bucket: datetime
    node_id: str
    gpu_index: int
    job_id: str | None
    samples: int
    utilization_avg: float | None
    utilization_max: float | None
    memory_used_mb_max: int | None
    temperature_max: float | None
    power_avg: float | None


@dataclass(frozen=True, slots=True)
class ServiceInstanceRow:
    instance_id: str
    service: str
    hostname: str
    pid: int
    started_at: datetime
    last_seen_at: datetime
    silent_s: float


@dataclass(frozen=True, slots=True)
class VcRow:
    name: str
    description: str
    quota: dict[str, int]
    max_gpus_per_user: int | None
    allowed_groups: list[str] | None
    interactive: bool
    created_at: datetime
    updated_at: datetime
    updated_by: str
    pending_jobs: int
    running_jobs: int
    # GPUs its jobs hold now: {"model", "borrowed", "gpus"} per GPU model (the caller maps
    # models to types), guaranteed or borrowed.
    usage: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class VcWrite:
    """What ``put_vc`` did: nothing when ``missing_groups`` names groups that do not exist."""

    created: bool = False
    missing_groups: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class VcDeletion:
    """What ``delete_vc`` found: the VC is gone when it was found with no live job."""

    found: bool
    live_jobs: int = 0


@dataclass(frozen=True, slots=True)
class JoinTokenRow:
    secret_sha256: str
    expired: bool
    used_at: datetime | None


class MembershipWrites:
    """The statements of one node-membership transaction (``ClusterRepository.membership``)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def lock_join_token(self, token_id: str) -> JoinTokenRow | None:
        row = await self.conn.fetchrow(SQL.lock_join_token, token_id)
        return JoinTokenRow(**row) if row is not None else None

    async def node_is_up(self, node_id: str) -> bool:
        return bool(await self.conn.fetchval(SQL.node_is_up, node_id))

    async def spend_join_token(self, token_id: str, node_id: str) -> None:
        await self.conn.execute(SQL.spend_join_token, token_id, node_id)

    async def grant_node_bus_user(self, user: str, node_id: str, password_hash: str, by: str) -> None:
        await self.conn.execute(SQL.upsert_node_bus_user, user, node_id, password_hash, by)

    async def mint_node_secret(self, node_id: str) -> str:
        """The node's new secret (its earlier one stops working at once)."""
        return await mint_node_credential(self.conn, node_id)

    async def node_known(self, node_id: str) -> bool:
        """Whether an agent of the node ever registered, or it ever held a secret."""
        return bool(await self.conn.fetchval(SQL.node_known, node_id))

    async def revoke_node_bus_user(self, user: str, node_id: str, by: str) -> None:
        await self.conn.execute(SQL.revoke_node_bus_user, user, node_id, by)

    async def revoke_node_secret(self, node_id: str) -> None:
        await revoke_node_credential(self.conn, node_id)


class ClusterRepository:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def append_event(self, event: Event, aggregate: str) -> None:
        """A request for the service that owns the entity: an event in the outbox, alone in
        its transaction."""
        async with self.db.transaction() as conn:
            await append(conn, event, aggregate=aggregate)

    # --- nodes and GPUs (the monitor's tables) -----------------------------------------

    async def list_nodes(self, node_id: str | None) -> list[NodeRow]:
        return [NodeRow(**r) for r in await self.db.fetch(SQL.list_nodes, node_id)]

    async def list_gpus(self, node_id: str | None) -> list[GpuRow]:
        return [GpuRow(**r) for r in await self.db.fetch(SQL.list_gpus, node_id)]

    async def health_events(self, node_id: str, limit: int) -> list[HealthEventRow]:
        return [HealthEventRow(**r) for r in await self.db.fetch(SQL.health_events, node_id, limit)]

    async def gpu_history(
        self, resolution_s: int, since_s: int, node_id: str | None, gpu: int | None, job_id: str | None
    ) -> list[HistoryRow]:
        rows = await self.db.fetch(SQL.gpu_history, resolution_s, since_s, node_id, gpu, job_id)
        return [HistoryRow(**r) for r in rows]

    async def job_owner(self, job_id: str) -> str | None:
        owner = await self.db.fetchval(SQL.job_owner, job_id)
        return None if owner is None else str(owner)

    async def list_service_instances(self) -> list[ServiceInstanceRow]:
        return [ServiceInstanceRow(**r) for r in await self.db.fetch(SQL.list_service_instances)]

    # --- virtual clusters (the API's own table) -----------------------------------------

    async def list_vcs(self, name: str | None, vc_user: str | None) -> list[VcRow]:
        """Every VC (or one), as far as ``vc_user`` may see them (None: an admin, all)."""
        return [VcRow(**row) for row in await self.db.fetch(SQL.list_vcs, name, vc_user)]

    async def quota_totals(self, excluding: str) -> dict[str, int]:
        """Guaranteed GPUs promised per GPU type by every VC but ``excluding``."""
        return {row["gpu_type"]: int(row["gpus"]) for row in await self.db.fetch(SQL.quota_totals, excluding)}

    async def gpus_per_node(self) -> list[tuple[int, str | None]]:
        """(GPU count, GPU model) of every registered node, ready or not."""
        return [(r["gpus"], r["model"]) for r in await self.db.fetch(SQL.cluster_shape)]

    async def put_vc(
        self,
        name: str,
        description: str,
        quota: dict[str, int],
        max_gpus_per_user: int | None,
        by: str,
        allowed: list[str] | None = None,
        set_access: bool = False,
        interactive: bool | None = None,
    ) -> VcWrite:
        """Create or replace the VC's definition. With ``set_access`` its access list
        becomes ``allowed`` (None: open to every user); without, the list is kept (a new
        VC is open). ``interactive`` None keeps the switch as it is (on for a new VC).
        Nothing is written when a group named does not exist."""
        async with self.db.transaction() as conn:
            if allowed:
                found = {r["name"] for r in await conn.fetch(SQL.lock_groups, allowed)}
                if missing := sorted(set(allowed) - found):
                    return VcWrite(missing_groups=missing)
            created = await conn.fetchval(
                SQL.upsert_vc,
                name,
                description,
                quota,
                max_gpus_per_user,
                by,
                allowed,
                set_access,
                interactive,
            )
        return VcWrite(created=bool(created))

    async def delete_vc(self, name: str) -> VcDeletion:
        """Delete the VC unless a job in it waits or runs."""
        async with self.db.transaction() as conn:
            if await conn.fetchval(SQL.lock_vc, name) is None:
                return VcDeletion(found=False)
            live = int(await conn.fetchval(SQL.vc_live_jobs, name))
            if not live:
                await conn.execute(SQL.delete_vc, name)
        return VcDeletion(found=True, live_jobs=live)

    # --- node membership and bus identities ----------------------------------------------

    @asynccontextmanager
    async def membership(self) -> AsyncIterator[MembershipWrites]:
        async with self.db.transaction() as conn:
            yield MembershipWrites(conn)

    async def create_join_token(
        self, token_id: str, secret_sha256: str, created_by: str, ttl: timedelta
    ) -> datetime:
        """The new token's expiry."""
        expires_at: datetime = await self.db.fetchval(
            SQL.insert_join_token, token_id, secret_sha256, created_by, ttl
        )
        return expires_at

    async def grant_integrator(self, user: str, streams: list[str], password_hash: str, by: str) -> None:
        """Minting the same user again replaces its password and streams."""
        await self.db.execute(SQL.upsert_integrator, user, streams, password_hash, by)

    async def revoke_integrator(self, user: str) -> bool:
        """False when the user holds no live credentials."""
        return await self.db.fetchval(SQL.revoke_integrator, user) is not None
