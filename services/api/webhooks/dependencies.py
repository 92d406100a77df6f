"""What the webhooks slice's routes ask FastAPI for: its repository, and the two signals
that tell this process's delivery loop and fan-in about a change at once (rather than at
their next poll)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import Depends, Request

from services.api.dependencies import Db
from services.api.webhooks.repository import WebhookRepository


async def webhook_repository(db: Db) -> WebhookRepository:
    return WebhookRepository(db)


async def delivery_wake(request: Request) -> asyncio.Event:
    """Set when a delivery is queued by hand (a redelivery)."""
    wake: asyncio.Event = request.app.state.webhook_wake
    return wake


async def webhooks_added(request: Request) -> asyncio.Event:
    """Set when a webhook is created through this process."""
    added: asyncio.Event = request.app.state.webhooks_added
    return added


WebhooksRepo = Annotated[WebhookRepository, Depends(webhook_repository)]
DeliveryWake = Annotated[asyncio.Event, Depends(delivery_wake)]
WebhooksAdded = Annotated[asyncio.Event, Depends(webhooks_added)]
