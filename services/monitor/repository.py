"""All of the monitor's SQL: node and GPU inventory, liveness."""

from __future__ import annotations

from pathlib import Path

from shared.db.pool import Connection
from shared.db.queries import Queries
from shared.events import NodeRegistered, NodeUnreachable
from shared.events.types import GpuInfo, NodeRegisteredData, NodeTelemetryData, NodeUnreachableData
from shared.outbox import append

SQL = Queries(Path(__file__).parent / "sql")
SOURCE = "corral/monitor"


async def record_heartbeat(conn: Connection, data: NodeTelemetryData) -> bool:
    """Store the node's heartbeat and readings; announce it when new, back, or changed.

    Returns whether a ``node.registered`` event was written.
    """
    previous = await conn.fetchval(SQL.node_state, data.node_id)
    inventory_before = [tuple(r) for r in await conn.fetch(SQL.gpu_inventory, data.node_id)]
    await conn.execute(
        SQL.upsert_node, data.node_id, data.hostname, data.simulated, len(data.gpus), data.address
    )
    await conn.executemany(
        SQL.upsert_gpu,
        [
            (
                data.node_id,
                g.index,
                g.uuid,
                g.model,
                g.memory_total_mb,
                g.utilization_pct,
                g.memory_used_mb,
                g.temperature_c,
            )
            for g in data.gpus
        ],
    )
    await conn.execute(SQL.delete_gpus_above, data.node_id, len(data.gpus))
    inventory_now = [(g.index, g.uuid, g.model, g.memory_total_mb) for g in data.gpus]
    if previous == "READY" and inventory_before == inventory_now:
        return False
    gpus = [GpuInfo(index=i, uuid=u, model=m, memory_total_mb=t) for i, u, m, t in inventory_now]
    event = NodeRegistered(
        source=SOURCE,
        subject=data.node_id,
        data=NodeRegisteredData(
            node_id=data.node_id, hostname=data.hostname, simulated=data.simulated, gpus=gpus
        ),
    )
    await append(conn, event, aggregate=data.node_id)
    return True


async def mark_silent_nodes_unreachable(conn: Connection, timeout_s: float) -> list[str]:
    marked = []
    for row in await conn.fetch(SQL.mark_unreachable, timeout_s):
        event = NodeUnreachable(
            source=SOURCE,
            subject=row["id"],
            data=NodeUnreachableData(node_id=row["id"], last_heartbeat_age_s=row["age_s"]),
        )
        await append(conn, event, aggregate=row["id"])
        marked.append(row["id"])
    return marked
