"""Composition root of the monitor service: heartbeats in, liveness out."""

from __future__ import annotations

import asyncio
import logging

from services.monitor.handlers import HEARTBEATS, MonitorHandlers
from services.monitor.repository import mark_silent_nodes_unreachable
from services.monitor.settings import Settings
from shared.bus import ConsumerSpec, run_consumer
from shared.db.pool import Database
from shared.service import every, run_service, service_resources

log = logging.getLogger(__name__)


async def check_liveness(db: Database, timeout_s: float) -> None:
    async with db.transaction() as conn:
        marked = await mark_silent_nodes_unreachable(conn, timeout_s)
    for node_id in marked:
        log.warning("node %s missed its heartbeats; now UNREACHABLE", node_id)


async def serve(settings: Settings) -> None:
    async with service_resources("monitor", settings.common) as res:
        handlers = MonitorHandlers(res.db)
        async with asyncio.TaskGroup() as tg:
            res.start_common_tasks(tg)
            tg.create_task(
                run_consumer(res.bus, ConsumerSpec(HEARTBEATS, handlers.handle), res.dead_letters),
                name="heartbeats",
            )
            timeout_s = settings.monitor.heartbeat_timeout_s
            tg.create_task(
                every(
                    settings.monitor.liveness_interval_s,
                    lambda: check_liveness(res.db, timeout_s),
                    "liveness check",
                ),
                name="liveness",
            )


def main() -> int:
    settings = Settings()
    return run_service("monitor", lambda: serve(settings))
