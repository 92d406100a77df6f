"""Nodes not heard from: a READY node whose heartbeats stopped for
``CORRAL_MONITOR_HEARTBEAT_TIMEOUT_S`` becomes UNREACHABLE (``corral.node.unreachable``);
its next heartbeat makes it READY again, announced anew (``registration.py``).

Heartbeats are core NATS: those sent while no monitor ran were never heard. So a monitor
judges no node silent in its first timeout, nor while its own writes lag behind what it
heard (``HeartbeatIngest.is_behind``): a node must not be declared lost for the monitor's
own delay.
"""

from __future__ import annotations

import logging
import time

from services.monitor import repository
from services.monitor.ingest import HeartbeatIngest
from services.monitor.registration import SOURCE
from shared.db.pool import Connection, Database
from shared.events import NodeUnreachable
from shared.events.nodes import NodeUnreachableData
from shared.outbox import append_many

log = logging.getLogger(__name__)


async def mark_silent_nodes_unreachable(conn: Connection, timeout_s: float) -> list[str]:
    """Mark and announce the nodes silent for ``timeout_s``; their ids."""
    silent = await repository.mark_unreachable(conn, timeout_s)
    events = [
        (
            NodeUnreachable(
                source=SOURCE,
                subject=node.node_id,
                data=NodeUnreachableData(node_id=node.node_id, last_heartbeat_age_s=node.age_s),
            ),
            node.node_id,
        )
        for node in silent
    ]
    await append_many(conn, events)
    return [node.node_id for node in silent]


async def check_liveness(db: Database, timeout_s: float, started: float, ingest: HeartbeatIngest) -> None:
    # Heartbeats sent while this monitor was down were not heard (core NATS): give the
    # nodes one timeout to be heard again before declaring any of them silent.
    if time.monotonic() - started < timeout_s:
        return
    if ingest.is_behind(timeout_s / 3):
        log.warning("heartbeats are waiting to be written; no node is judged silent meanwhile")
        return
    async with db.transaction() as conn:
        marked = await mark_silent_nodes_unreachable(conn, timeout_s)
    for node_id in marked:
        log.warning("node %s missed its heartbeats; now UNREACHABLE", node_id)
