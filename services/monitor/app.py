"""Composition root of the monitor service: heartbeats in; liveness, health, history and
/metrics out; admin drain requests carried out."""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial

from services.monitor.handlers import NODE_COMMANDS, MonitorHandlers
from services.monitor.health import default_rules
from services.monitor.ingest import HeartbeatIngest
from services.monitor.liveness import check_liveness
from services.monitor.metrics import metrics_routes
from services.monitor.repository import prune_history, prune_job_usage, roll_up_history, roll_up_job_usage
from services.monitor.settings import MonitorSettings, Settings
from shared.bus import ConsumerSpec, run_consumer
from shared.db.pool import Database
from shared.events import NodeTelemetry, subjects_of
from shared.idempotency import FORGET_EVERY_S, forget_processed
from shared.service import every, run_service, service_resources

log = logging.getLogger(__name__)
HEARTBEAT_SUBJECT = subjects_of(NodeTelemetry)[0]
HEARTBEAT_QUEUE = "monitor"


async def keep_history(db: Database, settings: MonitorSettings) -> None:
    async with db.transaction() as conn:
        await roll_up_history(conn, settings.history_resolution_s, settings.history_coarse_s)
        # Before the coarse buckets are pruned: a bucket is folded before it can be lost.
        await roll_up_job_usage(conn, settings.history_coarse_s)
        await prune_history(conn, settings.history_resolution_s, settings.history_keep_fine_s)
        await prune_history(conn, settings.history_coarse_s, settings.history_keep_coarse_s)
        await prune_job_usage(conn, settings.job_usage_keep_s)


async def serve(settings: Settings) -> None:
    async with service_resources("monitor", settings.common) as res:
        config = settings.monitor
        ingest = HeartbeatIngest(res.db, default_rules(), config)
        res.health.extra_routes.extend(metrics_routes(res.db, ingest))
        handlers = MonitorHandlers(res.db)
        started = time.monotonic()
        async with asyncio.TaskGroup() as tg:
            res.start_common_tasks(tg)
            tg.create_task(
                res.bus.listen(HEARTBEAT_SUBJECT, HEARTBEAT_QUEUE, ingest.receive), name="heartbeats"
            )
            tg.create_task(every(config.flush_interval_s, ingest.flush, "heartbeat flush"), name="flush")
            tg.create_task(
                every(config.readings_interval_s, ingest.write_readings, "readings and history"),
                name="readings",
            )
            tg.create_task(
                every(60.0, lambda: keep_history(res.db, config), "history upkeep"), name="history"
            )
            tg.create_task(
                every(FORGET_EVERY_S, partial(forget_processed, res.db), "processed events upkeep"),
                name="processed-events",
            )
            tg.create_task(
                run_consumer(res.bus, ConsumerSpec(NODE_COMMANDS, handlers.handle), res.dead_letters),
                name="node-commands",
            )
            tg.create_task(
                every(
                    config.liveness_interval_s,
                    lambda: check_liveness(res.db, config.heartbeat_timeout_s, started, ingest),
                    "liveness check",
                ),
                name="liveness",
            )


def main() -> int:
    settings = Settings()
    return run_service("monitor", lambda: serve(settings))
