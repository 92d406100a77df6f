"""The API's integrator loops, run as one root task: the event hub that feeds SSE
subscribers, the webhook fan-in consumers and the webhook delivery loop.

One TaskGroup holds them, so if any dies the root task dies with it and the process
exits non-zero for its supervisor to restart, like every other root task.
"""

from __future__ import annotations

import asyncio

import httpx

from services.api.event_hub import EventHub
from services.api.settings import ApiSettings
from services.api.webhook_delivery import WebhookDeliverer
from services.api.webhook_fanin import WEBHOOK_CONSUMERS, WebhookFanIn, run_fan_in
from shared.bus import Bus, DeadLetterSink
from shared.db.pool import Database


async def run_integrations(
    db: Database,
    bus: Bus,
    dead_letters: DeadLetterSink,
    settings: ApiSettings,
    hub: EventHub,
    wake: asyncio.Event,
    webhooks_added: asyncio.Event,
) -> None:
    async with httpx.AsyncClient(follow_redirects=False) as http, asyncio.TaskGroup() as tg:
        tg.create_task(hub.run(), name="event-hub")
        fan_in = WebhookFanIn(db, hub.scopes, wake, webhooks_added)
        for consumer in WEBHOOK_CONSUMERS:
            tg.create_task(run_fan_in(bus, consumer, fan_in, dead_letters), name=consumer.durable)
        tg.create_task(WebhookDeliverer(db, settings, http, wake).run(), name="webhook-delivery")
