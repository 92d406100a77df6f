"""Composition root of the launcher service: its consumer and its reconcile loop."""

from __future__ import annotations

import asyncio
import logging

from services.launcher import repository
from services.launcher.handlers import CONSUMER, LauncherHandlers
from services.launcher.settings import Settings
from shared.bus import ConsumerSpec, run_consumer
from shared.db.pool import Database
from shared.service import every, run_service, service_resources

log = logging.getLogger(__name__)


async def reconcile(db: Database, lease_s: float) -> None:
    """Repair what lost events left behind (on start, then periodically)."""
    repaired = await repository.reconcile(db, lease_s)
    if any(repaired.values()):
        log.info("reconciled: %s", repaired)


async def serve(settings: Settings) -> None:
    async with service_resources("launcher", settings.common) as res:
        handlers = LauncherHandlers(res.db)
        async with asyncio.TaskGroup() as tg:
            res.start_common_tasks(tg)
            tg.create_task(
                run_consumer(res.bus, ConsumerSpec(CONSUMER, handlers.handle), res.dead_letters),
                name="consumer",
            )
            tg.create_task(
                every(
                    settings.launcher.reconcile_interval_s,
                    lambda: reconcile(res.db, settings.agent.lease_s),
                    "reconcile",
                ),
                name="reconcile",
            )


def main() -> int:
    settings = Settings()
    return run_service("launcher", lambda: serve(settings))
