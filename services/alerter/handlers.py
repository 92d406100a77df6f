"""The alerter's consumers: lifecycle events in, alerts out (idempotently)."""

from __future__ import annotations

from services.alerter.repository import open_alert
from services.alerter.rules import draft_for
from shared.bus import ConsumerConfig
from shared.bus.streams import JOBS, NODES
from shared.db.pool import Database
from shared.events import Event
from shared.idempotency import first_time

JOB_EVENTS = ConsumerConfig(
    stream=JOBS.name, durable="alerter-jobs", filter_subjects=("corral.job.failed.>",)
)
NODE_EVENTS = ConsumerConfig(
    stream=NODES.name,
    durable="alerter-nodes",
    filter_subjects=("corral.node.unreachable.>", "corral.node.drained.>"),
)


class AlerterHandlers:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def handle(self, event: Event) -> None:
        draft = draft_for(event)
        if draft is None:
            return
        async with self._db.transaction() as conn:
            if await first_time(conn, "alerter", event.id):
                await open_alert(conn, draft)
