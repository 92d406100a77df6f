"""Composition root of the launcher service: its consumer and its reconcile loop."""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from services.launcher import repository
from services.launcher.handlers import CONSUMER, LauncherHandlers
from services.launcher.settings import Settings
from shared.bus import ConsumerSpec, run_consumer
from shared.db.pool import Database
from shared.service import run_service, service_resources

log = logging.getLogger(__name__)


async def reconcile_forever(db: Database, interval_s: float) -> None:
    """On start and then periodically, repair what lost events left behind."""
    while True:
        try:
            repaired = await repository.reconcile(db)
            if any(repaired.values()):
                log.info("reconciled: %s", repaired)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("reconcile failed (%s); will retry", exc)
        await asyncio.sleep(interval_s)


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
                reconcile_forever(res.db, settings.launcher.reconcile_interval_s), name="reconcile"
            )


def main() -> int:
    settings = Settings()
    return run_service("launcher", lambda: serve(settings))
