"""All of the monitor's SQL, through the named queries of ``sql/``: node and GPU
inventory, liveness, health marks and drains, readings and history. Nothing here
decides, and no event is built here: ``registration.py``, ``liveness.py`` and
``drains.py`` decide, and write the events that go with the changes.

The writes of the hot path (readings, history: 40,000 GPUs' rows every interval of a
5,000-node cluster) go in multi-row statements of ``ROWS_PER_STATEMENT`` rows, always
in (node, GPU) order, so concurrent monitors never deadlock.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import asyncpg

from shared.db.pool import Connection
from shared.db.queries import Queries
from shared.events.nodes import GpuSample, NodeTelemetryData

SQL = Queries(Path(__file__).parent / "sql")
ROWS_PER_STATEMENT = 4000  # readings or history rows in one multi-row statement (see _chunks)
_Row = TypeVar("_Row")

GpuInventory = tuple[int, str, str, int, int]  # index, uuid, model, memory_total_mb, nvlink_domain
# rack, CPUs, memory, GPU sharing, container runtime, GPUs
Inventory = tuple[str, float, int, str, str, tuple[GpuInventory, ...]]


class NodeHealth(NamedTuple):
    """What the health rules need of a node, its row locked."""

    drained: bool
    health_marks: dict[str, Any]
    health_waivers: list[str]
    expected_gpus: int


class SilentNode(NamedTuple):
    node_id: str
    age_s: float  # since its last heartbeat


# --- nodes and their GPUs ----------------------------------------------------------------


async def lock_nodes(conn: Connection, node_ids: Iterable[str]) -> dict[str, str]:
    """Lock these nodes' rows (in id order); their liveness states, for those that exist."""
    return {r["id"]: r["state"] for r in await conn.fetch(SQL.lock_nodes, sorted(set(node_ids)))}


async def inventories(conn: Connection, node_ids: list[str]) -> dict[str, Inventory]:
    """What these nodes were made of when last registered (those registered at all)."""
    nodes: dict[str, tuple[str, float, int, str, str]] = {}
    gpus: dict[str, list[GpuInventory]] = {}
    for r in await conn.fetch(SQL.gpu_inventories, node_ids):
        nodes[r["node_id"]] = (r["rack"], r["cpus"], r["memory_mb"], r["gpu_sharing"], r["container_runtime"])
        if r["index"] is not None:
            gpus.setdefault(r["node_id"], []).append(
                (r["index"], r["uuid"], r["model"], r["memory_total_mb"], r["nvlink_domain"])
            )
    return {node_id: (*node, tuple(gpus.get(node_id, ()))) for node_id, node in nodes.items()}


async def upsert_nodes(conn: Connection, heartbeats: Sequence[NodeTelemetryData]) -> dict[str, int]:
    """Store these nodes (in the given order, their ids sorted by the caller) as heard
    now; each node's expected GPUs."""
    rows = await conn.fetch(
        SQL.register_nodes,
        [h.node_id for h in heartbeats],
        [h.hostname for h in heartbeats],
        [h.simulated for h in heartbeats],
        [len(h.gpus) for h in heartbeats],
        [h.address for h in heartbeats],
        [h.rack for h in heartbeats],
        [h.cpus for h in heartbeats],
        [h.memory_mb for h in heartbeats],
        [h.gpu_sharing for h in heartbeats],
        [h.container_runtime for h in heartbeats],
    )
    return {r["id"]: int(r["expected_gpus"]) for r in rows}


async def delete_gpus_beyond(conn: Connection, heartbeats: Sequence[NodeTelemetryData]) -> None:
    """Forget the GPUs a node no longer has (index past its count)."""
    await conn.execute(
        SQL.delete_gpus_beyond, [h.node_id for h in heartbeats], [len(h.gpus) for h in heartbeats]
    )


async def touch_nodes(conn: Connection, node_ids: Iterable[str]) -> list[str]:
    """Liveness for many known nodes in one statement. Returns the ids of the nodes that
    were UNREACHABLE: back now, they are to be announced again."""
    rows = await conn.fetch(SQL.touch_nodes, sorted(node_ids))
    return [row["id"] for row in rows if row["previous_state"] == "UNREACHABLE"]


async def mark_unreachable(conn: Connection, timeout_s: float) -> list[SilentNode]:
    """The READY nodes not heard for ``timeout_s``, now UNREACHABLE."""
    return [SilentNode(row["id"], row["age_s"]) for row in await conn.fetch(SQL.mark_unreachable, timeout_s)]


def _csv(values: Iterable[str] | None) -> str | None:
    return None if values is None else ",".join(values)


async def write_inventory(conn: Connection, heartbeats: Sequence[NodeTelemetryData]) -> None:
    ordered = sorted(heartbeats, key=lambda h: h.node_id)
    gpus = [(h.node_id, g) for h in ordered for g in sorted(h.gpus, key=lambda g: g.index)]
    await conn.execute(
        SQL.upsert_inventory,
        [n for n, _ in gpus],
        [g.index for _, g in gpus],
        [g.uuid for _, g in gpus],
        [g.model for _, g in gpus],
        [g.memory_total_mb for _, g in gpus],
        [g.nvlink_domain for _, g in gpus],
    )


# One row of ``upsert_readings``: node, GPU index, then the readings in the statement's order.
ReadingsRow = tuple[object, ...]


def readings_rows(data: NodeTelemetryData) -> list[ReadingsRow]:
    """The rows ``write_readings_rows`` stores for one heartbeat, in GPU order."""
    node_id = data.node_id
    return [
        (
            node_id,
            g.index,
            g.utilization_pct,
            g.memory_used_mb,
            g.temperature_c,
            g.memory_utilization_pct,
            g.power_w,
            g.sm_clock_mhz,
            _csv(g.throttle_reasons),
            g.ecc_corrected_volatile,
            g.ecc_uncorrected_volatile,
            g.remapped_rows_pending,
            g.remap_failure,
            g.last_xid,
            g.xid_count,
            g.lost,
            _csv(g.unsupported) or "",
        )
        for g in sorted(data.gpus, key=lambda g: g.index)
    ]


async def write_readings(conn: Connection, heartbeats: Sequence[NodeTelemetryData]) -> None:
    ordered = sorted(heartbeats, key=lambda h: h.node_id)
    await write_readings_rows(conn, [row for h in ordered for row in readings_rows(h)])


async def write_readings_rows(conn: Connection, rows: Sequence[ReadingsRow]) -> None:
    """Each GPU's latest readings. ``rows`` come in (node, GPU) order, as every writer
    writes them: concurrent monitors never deadlock."""
    for chunk in _chunks(rows):
        columns = [list(column) for column in zip(*chunk, strict=True)]
        await conn.execute(SQL.upsert_readings, *columns)


def _chunks(rows: Sequence[_Row]) -> Iterator[Sequence[_Row]]:
    """``rows`` in slices of ``ROWS_PER_STATEMENT``, in order. asyncpg encodes a statement's
    arrays in one go, holding the event loop (and the heartbeats) meanwhile: a large
    cluster's readings in one statement would stall them (docs/performance.md)."""
    for start in range(0, len(rows), ROWS_PER_STATEMENT):
        yield rows[start : start + ROWS_PER_STATEMENT]


async def latest_gpus(conn: Connection) -> list[asyncpg.Record]:
    """Every GPU's latest readings with its node and the job using it: a scrape's rows,
    as asyncpg reads them (``metrics.py`` formats each once)."""
    return await conn.fetch(SQL.latest_gpus)


# --- health and drains -------------------------------------------------------------------


async def node_health(conn: Connection, node_id: str) -> NodeHealth | None:
    """The node's health marks, waivers and expected GPUs, its row locked."""
    row = await conn.fetchrow(SQL.node_health, node_id)
    if row is None:
        return None
    return NodeHealth(row["drained"], row["health_marks"], list(row["health_waivers"]), row["expected_gpus"])


async def save_health_marks(conn: Connection, node_id: str, marks: dict[str, object]) -> None:
    await conn.execute(SQL.save_health_marks, node_id, marks)


async def insert_health_event(
    conn: Connection,
    node_id: str,
    kind: str,
    gpu: int | None,
    condition: str,
    action: str,
    detail: str,
    actor: str,
) -> None:
    await conn.execute(SQL.insert_health_event, node_id, kind, gpu, condition, action, detail, actor)


async def drain_node(conn: Connection, node_id: str, reason: str, by: str, evict: bool) -> bool:
    """Drain the node (or widen its drain to evicting); False if that changed nothing."""
    return await conn.fetchval(SQL.drain_node, node_id, reason, by, evict) is not None


async def undrain_node(conn: Connection, node_id: str, waived: list[str], expected_gpus: int) -> bool:
    """Undrain the node, accepting ``waived``; False if it was not drained."""
    return await conn.fetchval(SQL.undrain_node, node_id, waived, expected_gpus) is not None


async def node_exists(conn: Connection, node_id: str) -> bool:
    return await conn.fetchval(SQL.node_exists, node_id) is not None


async def current_gpus(conn: Connection, node_id: str) -> list[GpuSample]:
    """The node's GPUs as last read: which are lost, which failed a row remap."""
    return [
        GpuSample(
            index=r["index"],
            uuid=r["uuid"],
            model=r["model"],
            memory_total_mb=r["memory_total_mb"],
            lost=r["lost"],
            remap_failure=r["remap_failure"],
        )
        for r in await conn.fetch(SQL.current_gpus, node_id)
    ]


# --- history -----------------------------------------------------------------------------


class HistoryRow(NamedTuple):
    """One GPU's bucket. A named tuple, not a dataclass: 40,000 are made every readings
    interval of a 5,000-node cluster, and a tuple is made in a fraction of the time."""

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


async def write_history(conn: Connection, resolution_s: int, rows: Sequence[HistoryRow]) -> None:
    ordered = sorted(rows, key=operator.itemgetter(1, 2, 0))  # (node, GPU, bucket): one lock order
    for chunk in _chunks(ordered):
        columns = [list(column) for column in zip(*chunk, strict=True)]  # the fields' order is the SQL's
        await conn.execute(SQL.upsert_history, resolution_s, *columns)


async def roll_up_history(conn: Connection, fine_s: int, coarse_s: int) -> None:
    await conn.execute(SQL.roll_up_history, fine_s, coarse_s)


async def prune_history(conn: Connection, resolution_s: int, keep_s: float) -> None:
    await conn.execute(SQL.prune_history, resolution_s, keep_s)


async def roll_up_job_usage(conn: Connection, coarse_s: int) -> None:
    """Fold the coarse buckets that are final into each job's daily usage, once each."""
    await conn.execute(SQL.roll_up_job_usage, coarse_s)


async def prune_job_usage(conn: Connection, keep_s: float) -> None:
    await conn.execute(SQL.prune_job_usage, keep_s)


async def gpu_owners(conn: Connection) -> dict[tuple[str, int], tuple[str, str]]:
    """(node, GPU index) -> (job id, task) for every GPU a live attempt holds."""
    return {(r["node_id"], r["gpu"]): (r["job_id"], r["task"]) for r in await conn.fetch(SQL.gpu_owners)}
