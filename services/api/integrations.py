"""The API's integrator loops, run as one root task: the event hub that feeds SSE
subscribers (``events/hub.py``), the webhook fan-in consumers (``webhooks/fan_in.py``)
and the webhook delivery loop (``webhooks/delivery.py``). Each lives in its slice; this
module only composes them.

One TaskGroup holds them, so if any dies the root task dies with it and the process
exits non-zero for its supervisor to restart, like every other root task.
"""

from __future__ import annotations

import asyncio

import httpx

from services.api.events.hub import EventHub
from services.api.settings import ApiSettings
from services.api.webhooks.delivery import WebhookDeliverer
from services.api.webhooks.fan_in import WEBHOOK_CONSUMERS, WebhookFanIn, run_fan_in
from services.api.webhooks.repository import WebhookRepository
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
        webhooks = WebhookRepository(db)
        fan_in = WebhookFanIn(webhooks, hub.scopes, wake, webhooks_added)
        for consumer in WEBHOOK_CONSUMERS:
            tg.create_task(run_fan_in(bus, consumer, fan_in, dead_letters), name=consumer.durable)
        tg.create_task(WebhookDeliverer(webhooks, settings, http, wake).run(), name="webhook-delivery")
