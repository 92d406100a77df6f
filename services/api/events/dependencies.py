"""The event hub, as the stream route asks for it (``MaybeHub``: None without a bus)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from services.api.events.hub import EventHub


async def event_hub(request: Request) -> EventHub | None:
    hub: EventHub | None = request.app.state.event_hub
    return hub


MaybeHub = Annotated[EventHub | None, Depends(event_hub)]
