"""The monitor's consumer of admin drain / undrain requests (the nodes stream).

Heartbeats do not come through here: they are a core-NATS queue group handled by
``ingest.HeartbeatIngest`` (see there for why).
"""

from __future__ import annotations

import logging

from services.monitor.drains import apply_drain_request
from shared.bus import ConsumerConfig
from shared.bus.streams import NODES
from shared.db.pool import Database
from shared.events import Event, NodeDrainRequested, subjects_of
from shared.idempotency import first_time

log = logging.getLogger(__name__)

CONSUMER = "monitor-node-commands"
NODE_COMMANDS = ConsumerConfig(
    stream=NODES.name,
    durable=CONSUMER,
    filter_subjects=subjects_of(NodeDrainRequested),
)


class MonitorHandlers:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def handle(self, event: Event) -> None:
        if not isinstance(event, NodeDrainRequested):
            return
        async with self._db.transaction() as conn:
            if not await first_time(conn, CONSUMER, event.id):
                return
            changed = await apply_drain_request(conn, event.data)
        verb = "drained" if event.data.drain else "undrained"
        if changed:
            log.warning("node %s %s by %s", event.data.node_id, verb, event.data.requested_by)
        else:
            log.info("node %s: nothing to do (already %s, or unknown)", event.data.node_id, verb)
