"""What the interactive routes ask FastAPI for: the slice's repository, the bus client the
streams run over (absent without a bus), and the portal's sign-in sessions (absent
without the portal), all left on ``app.state`` by the composition root."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from nats.aio.client import Client
from starlette.requests import HTTPConnection

from services.api.interactive.access import CookieSessions
from services.api.interactive.repository import InteractiveRepository
from services.api.settings import ApiSettings
from shared.db.pool import Database


async def interactive_repository(conn: HTTPConnection) -> InteractiveRepository:
    db: Database = conn.app.state.db
    return InteractiveRepository(db)


async def nats_client(conn: HTTPConnection) -> Client | None:
    nc: Client | None = conn.app.state.interactive_nats
    return nc


async def cookie_sessions(conn: HTTPConnection) -> CookieSessions | None:
    found: CookieSessions | None = getattr(conn.app.state, "portal_sessions", None)
    return found


async def settings(conn: HTTPConnection) -> ApiSettings:
    found: ApiSettings = conn.app.state.api_settings
    return found


InteractiveRepo = Annotated[InteractiveRepository, Depends(interactive_repository)]
MaybeNats = Annotated[Client | None, Depends(nats_client)]
MaybeCookies = Annotated[CookieSessions | None, Depends(cookie_sessions)]
Settings = Annotated[ApiSettings, Depends(settings)]
