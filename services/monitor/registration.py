"""Which nodes are announced: a node new to the cluster, back from silence, or whose GPUs,
rack, CPUs, memory, GPU sharing or container runtime changed is a new registration
(``corral.node.registered``), written with its inventory in the flush's transaction
(``ingest.py`` batches them).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

from services.monitor import repository
from services.monitor.repository import Inventory
from shared.db.pool import Connection
from shared.events import NodeRegistered
from shared.events.nodes import GpuInfo, NodeRegisteredData, NodeTelemetryData
from shared.outbox import append_many

SOURCE = "corral/monitor"

_INVENTORY = operator.attrgetter("index", "uuid", "model", "memory_total_mb", "nvlink_domain")


def inventory(data: NodeTelemetryData) -> Inventory:
    """What a node is made of: its rack, CPUs, memory, GPU sharing and container runtime, and
    each GPU's (index, uuid, model, memory, NVLink domain). A change is a new registration. The
    ingest compares it for every heartbeat, hence ``attrgetter`` (half the cost of a generator
    expression)."""
    return (
        data.rack,
        data.cpus,
        data.memory_mb,
        data.gpu_sharing,
        data.container_runtime,
        tuple(map(_INVENTORY, data.gpus)),
    )


def _registered_event(data: NodeTelemetryData) -> NodeRegistered:
    gpus = [
        GpuInfo(index=i, uuid=u, model=m, memory_total_mb=t, nvlink_domain=d)
        for i, u, m, t, d in inventory(data)[-1]
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
            gpu_sharing=data.gpu_sharing,
            container_runtime=data.container_runtime,
        ),
    )


async def register_nodes(
    conn: Connection, heartbeats: Sequence[NodeTelemetryData], states: dict[str, str] | None = None
) -> dict[str, int]:
    """Store nodes new to this monitor (or whose GPUs changed), all in a few statements;
    announce the ones that are new, back, or changed. Returns each node's expected GPUs.
    ``states``: what ``repository.lock_nodes`` returned for them, if the caller locked
    them already."""
    if not heartbeats:
        return {}
    by_id = {h.node_id: h for h in heartbeats}
    ids = sorted(by_id)
    if states is None:
        states = await repository.lock_nodes(conn, ids)
    before = await repository.inventories(conn, ids)
    ordered = [by_id[i] for i in ids]
    expected = await repository.upsert_nodes(conn, ordered)
    await repository.write_inventory(conn, ordered)
    await repository.write_readings(conn, ordered)
    await repository.delete_gpus_beyond(conn, ordered)
    announce = [
        by_id[node_id]
        for node_id in expected
        if states.get(node_id) != "READY" or before.get(node_id) != inventory(by_id[node_id])
    ]
    await append_many(conn, [(_registered_event(d), d.node_id) for d in announce])
    return expected


async def announce_nodes(conn: Connection, heartbeats: Sequence[NodeTelemetryData]) -> None:
    """``corral.node.registered`` for each of these nodes, as they are now."""
    await append_many(conn, [(_registered_event(d), d.node_id) for d in heartbeats])
