"""Composition root of the scheduler: leadership, the cycle, and what wakes it."""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from services.scheduler.cycle import Cycle
from services.scheduler.dry_run import answer_dry_run
from services.scheduler.leader import Leadership
from services.scheduler.settings import Settings
from services.scheduler.wakeups import RETIRED_CONSUMERS, WAKING_SUBJECTS
from shared.dry_run import DRY_RUN_QUEUE, DRY_RUN_SUBJECT
from shared.gc_tuning import tune_garbage_collector
from shared.service import run_service, service_resources

log = logging.getLogger(__name__)


async def serve(settings: Settings) -> None:
    async with service_resources("scheduler", settings.common) as res:
        database = settings.common.database
        leadership = Leadership(
            database.url, settings.scheduler.leader_retry_s, password_file=database.password_file
        )
        scheduler = settings.scheduler
        cycle = Cycle(
            leadership,
            scheduler.cycle_interval_s,
            scheduler.plan_settings(),
            scheduler.starvation(),
            min_gap_s=scheduler.min_cycle_gap_s,
        )
        async with asyncio.TaskGroup() as tg:
            res.start_common_tasks(tg)
            tg.create_task(leadership.run(), name="leadership")
            tg.create_task(cycle.run(), name="cycle")
            tg.create_task(
                res.bus.answer(
                    DRY_RUN_SUBJECT, DRY_RUN_QUEUE, partial(answer_dry_run, res.db, cycle.settings)
                ),
                name="dry-run",
            )
            tg.create_task(res.bus.watch(WAKING_SUBJECTS, cycle.wake), name="wake-ups")
            for stream, durable in RETIRED_CONSUMERS:  # (gone already: nothing to do)
                try:
                    await res.bus.delete_consumer(stream, durable)
                except ConnectionError as exc:  # housekeeping: not worth failing the start for
                    log.warning("could not delete the retired consumer %s (%s)", durable, exc)


def main() -> int:
    settings = Settings()
    # A cycle keeps ~100,000 records alive at 5,000 nodes: see shared/gc_tuning.py.
    tune_garbage_collector()
    return run_service("scheduler", lambda: serve(settings))
