"""Composition root of the alerter service."""

from __future__ import annotations

import asyncio

from services.alerter.handlers import ALERT_ACTIONS, JOB_EVENTS, NODE_EVENTS, AlerterHandlers
from services.alerter.settings import Settings
from shared.bus import ConsumerSpec, run_consumer
from shared.service import run_service, service_resources


async def serve(settings: Settings) -> None:
    async with service_resources("alerter", settings.common) as res:
        handlers = AlerterHandlers(res.db)
        async with asyncio.TaskGroup() as tg:
            res.start_common_tasks(tg)
            for config in (JOB_EVENTS, NODE_EVENTS, ALERT_ACTIONS):
                spec = ConsumerSpec(config, handlers.handle)
                tg.create_task(run_consumer(res.bus, spec, res.dead_letters), name=config.durable)


def main() -> int:
    settings = Settings()
    return run_service("alerter", lambda: serve(settings))
