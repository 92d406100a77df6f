"""The monitor's consumer of node heartbeats (the metrics stream).

Monitor instances share one durable consumer, so they split the heartbeats between
them like a queue group. A heartbeat is an upsert of "latest state", so redelivery is
harmless without an idempotency record (and metrics are too many to record each).
"""

from __future__ import annotations

from services.monitor.repository import record_heartbeat
from shared.bus import ConsumerConfig
from shared.bus.streams import METRICS
from shared.db.pool import Database
from shared.events import Event, NodeTelemetry

HEARTBEATS = ConsumerConfig(
    stream=METRICS.name,
    durable="monitor-heartbeats",
    filter_subjects=("corral.metrics.node.>",),
    ack_wait_s=10.0,
    max_deliver=3,
    deliver_all=False,
)


class MonitorHandlers:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def handle(self, event: Event) -> None:
        if isinstance(event, NodeTelemetry):
            async with self._db.transaction() as conn:
                await record_heartbeat(conn, event.data)
