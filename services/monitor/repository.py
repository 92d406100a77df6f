"""All of the monitor's SQL: node and GPU inventory, liveness, health and drains, history."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import NamedTuple, TypeVar

from services.monitor.health import LASTING, Finding, HealthMarks, HealthRules, evaluate, lasting_conditions
from shared.db.pool import Connection
from shared.db.queries import Queries
from shared.events import NodeDrained, NodeRegistered, NodeUndrained, NodeUnreachable
from shared.events.nodes import (
    GpuInfo,
    GpuSample,
    NodeDrainedData,
    NodeDrainRequestedData,
    NodeRegisteredData,
    NodeTelemetryData,
    NodeUndrainedData,
    NodeUnreachableData,
)
from shared.outbox import append, append_many

SQL = Queries(Path(__file__).parent / "sql")
SOURCE = "corral/monitor"
ROWS_PER_STATEMENT = 4000  # readings or history rows in one multi-row statement (see _chunks)
_Row = TypeVar("_Row")


_INVENTORY = operator.attrgetter("index", "uuid", "model", "memory_total_mb", "nvlink_domain")

GpuInventory = tuple[int, str, str, int, int]  # index, uuid, model, memory_total_mb, nvlink_domain
Inventory = tuple[str, float, int, tuple[GpuInventory, ...]]  # rack, CPUs, memory, GPUs


def inventory(data: NodeTelemetryData) -> Inventory:
    """What a node is made of: its rack, CPUs and memory, and each GPU's (index, uuid,
    model, memory, NVLink domain). A change is a new registration. The ingest compares it
    for every heartbeat, hence ``attrgetter`` (half the cost of a generator expression)."""
    return data.rack, data.cpus, data.memory_mb, tuple(map(_INVENTORY, data.gpus))


def _registered_event(data: NodeTelemetryData) -> NodeRegistered:
    gpus = [
        GpuInfo(index=i, uuid=u, model=m, memory_total_mb=t, nvlink_domain=d)
        for i, u, m, t, d in inventory(data)[3]
    ]
    return NodeRegistered(
        source=SOURCE,
        subject=data.node_id,
        data=NodeRegisteredData(
            node_id=data.node_id,
            hostname=data.hostname,
            simulated=data.simulated,
            gpus=gpus,
            rack=data.rack,
            cpus=data.cpus,
            memory_mb=data.memory_mb,
        ),
    )


async def lock_nodes(conn: Connection, node_ids: Iterable[str]) -> dict[str, str]:
    """Lock these nodes' rows (in id order); their liveness states, for those that exist."""
    return {r["id"]: r["state"] for r in await conn.fetch(SQL.lock_nodes, sorted(set(node_ids)))}


async def register_nodes(
    conn: Connection, heartbeats: Sequence[NodeTelemetryData], states: dict[str, str] | None = None
) -> dict[str, int]:
    """Store nodes new to this monitor (or whose GPUs changed), all in a few statements;
    announce the ones that are new, back, or changed. Returns each node's expected GPUs.
    ``states``: what ``lock_nodes`` returned for them, if the caller locked them already."""
    if not heartbeats:
        return {}
    by_id = {h.node_id: h for h in heartbeats}
    ids = sorted(by_id)
    if states is None:
        states = await lock_nodes(conn, ids)
    nodes_before: dict[str, tuple[str, float, int]] = {}
    gpus_before: dict[str, list[GpuInventory]] = {}
    for r in await conn.fetch(SQL.gpu_inventories, ids):
        nodes_before[r["node_id"]] = (r["rack"], r["cpus"], r["memory_mb"])
        if r["index"] is not None:
            gpus_before.setdefault(r["node_id"], []).append(
                (r["index"], r["uuid"], r["model"], r["memory_total_mb"], r["nvlink_domain"])
            )
    before = {node_id: (*node, tuple(gpus_before.get(node_id, ()))) for node_id, node in nodes_before.items()}
    rows = await conn.fetch(
        SQL.register_nodes,
        ids,
        [by_id[i].hostname for i in ids],
        [by_id[i].simulated for i in ids],
        [len(by_id[i].gpus) for i in ids],
        [by_id[i].address for i in ids],
        [by_id[i].rack for i in ids],
        [by_id[i].cpus for i in ids],
        [by_id[i].memory_mb for i in ids],
    )
    await write_inventory(conn, [by_id[i] for i in ids])
    await write_readings(conn, [by_id[i] for i in ids])
    await conn.execute(SQL.delete_gpus_beyond, ids, [len(by_id[i].gpus) for i in ids])
    announce = [
        by_id[r["id"]]
        for r in rows
        if states.get(r["id"]) != "READY" or before.get(r["id"]) != inventory(by_id[r["id"]])
    ]
    await append_many(conn, [(_registered_event(d), d.node_id) for d in announce])
    return {r["id"]: int(r["expected_gpus"]) for r in rows}


async def touch_nodes(conn: Connection, node_ids: Iterable[str]) -> list[str]:
    """Liveness for many known nodes in one statement. Returns the ids of the nodes that
    were UNREACHABLE: back now, they are to be announced again (``announce_nodes``)."""
    rows = await conn.fetch(SQL.touch_nodes, sorted(node_ids))
    return [row["id"] for row in rows if row["previous_state"] == "UNREACHABLE"]


async def announce_nodes(conn: Connection, heartbeats: Sequence[NodeTelemetryData]) -> None:
    """``corral.node.registered`` for each of these nodes, as they are now."""
    await append_many(conn, [(_registered_event(d), d.node_id) for d in heartbeats])


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
    arrays in one go, holding the event loop (and the heartbeats): 40,000 GPUs' readings
    in one statement held it for about half a second."""
    for start in range(0, len(rows), ROWS_PER_STATEMENT):
        yield rows[start : start + ROWS_PER_STATEMENT]


async def mark_silent_nodes_unreachable(conn: Connection, timeout_s: float) -> list[str]:
    rows = await conn.fetch(SQL.mark_unreachable, timeout_s)
    events = [
        (
            NodeUnreachable(
                source=SOURCE,
                subject=row["id"],
                data=NodeUnreachableData(node_id=row["id"], last_heartbeat_age_s=row["age_s"]),
            ),
            row["id"],
        )
        for row in rows
    ]
    await append_many(conn, events)
    return [row["id"] for row in rows]


# --- health and drains ---------------------------------------------------------------


async def _record(
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


async def drain(conn: Connection, node_id: str, reason: str, by: str, evict: bool) -> bool:
    """Drain the node (or widen a drain to evicting); announce it. False if nothing changed."""
    if await conn.fetchval(SQL.drain_node, node_id, reason, by, evict) is None:
        return False
    await _record(conn, node_id, "drained", None, "drain", "evict" if evict else "drain", reason, by)
    event = NodeDrained(
        source=SOURCE,
        subject=node_id,
        data=NodeDrainedData(node_id=node_id, reason=reason, drained_by=by, evict=evict),
    )
    await append(conn, event, aggregate=node_id)
    return True


async def check_health(conn: Connection, data: NodeTelemetryData, rules: HealthRules) -> list[Finding]:
    """Evaluate the rules on one heartbeat, under the node's row lock; drain if they say so."""
    row = await conn.fetchrow(SQL.node_health, data.node_id)
    if row is None:
        return []
    marks = HealthMarks.from_json(row["health_marks"])
    findings, new_marks = evaluate(
        data.gpus,
        data.boot_id,
        marks,
        frozenset(row["health_waivers"]),
        row["expected_gpus"],
        rules,
        data.gpu_fault,
    )
    if new_marks != marks:
        await conn.execute(SQL.save_health_marks, data.node_id, new_marks.to_json())
    acting = [f for f in findings if f.action != "ignore"]
    new_events = [f for f in findings if f.condition not in LASTING]
    for f in new_events if row["drained"] else findings:
        # Lasting conditions are written once, when they drain; events every time they occur.
        await _record(conn, data.node_id, "finding", f.gpu_index, f.condition, f.action, f.detail, "monitor")
    if acting:
        evict = any(f.action == "evict" for f in acting)
        await drain(conn, data.node_id, "; ".join(f.detail for f in acting), "monitor", evict)
    return findings


async def apply_drain_request(conn: Connection, request: NodeDrainRequestedData) -> bool:
    """An admin's drain or undrain. Undraining accepts the lasting conditions present now."""
    if await conn.fetchval(SQL.node_exists, request.node_id) is None:
        return False
    if request.drain:
        return await drain(
            conn, request.node_id, request.reason or "drained by an admin", request.requested_by, False
        )
    rows = await conn.fetch(SQL.current_gpus, request.node_id)
    gpus = [
        GpuSample(
            index=r["index"],
            uuid=r["uuid"],
            model=r["model"],
            memory_total_mb=r["memory_total_mb"],
            lost=r["lost"],
            remap_failure=r["remap_failure"],
        )
        for r in rows
    ]
    waived = lasting_conditions(gpus)
    if await conn.fetchval(SQL.undrain_node, request.node_id, waived, len(gpus)) is None:
        return False
    detail = request.reason or "undrained by an admin"
    if waived:
        detail += f" (accepted: {', '.join(waived)})"
    await _record(conn, request.node_id, "undrained", None, "undrain", "none", detail, request.requested_by)
    event = NodeUndrained(
        source=SOURCE,
        subject=request.node_id,
        data=NodeUndrainedData(node_id=request.node_id, undrained_by=request.requested_by, waived=waived),
    )
    await append(conn, event, aggregate=request.node_id)
    return True


# --- history -------------------------------------------------------------------------


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


async def gpu_owners(conn: Connection) -> dict[tuple[str, int], tuple[str, str]]:
    """(node, GPU index) -> (job id, task) for every GPU a live attempt holds."""
    return {(r["node_id"], r["gpu"]): (r["job_id"], r["task"]) for r in await conn.fetch(SQL.gpu_owners)}
