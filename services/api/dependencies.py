"""What every slice may ask FastAPI for: the database pool, the API's settings, JetStream.

The composition root (``app.py``) leaves each resource on ``app.state`` once; routes
never read ``app.state`` themselves but declare a typed alias (``Db``,
``SettingsDep``...), so what a route depends on is in its signature. Each slice adds
its own aliases in its ``dependencies.py`` (its repository first of all); who is asking
is ``services.api.tenants.auth.AuthenticatedPrincipal``.

Every provider is ``async def``, though none awaits: FastAPI runs a plain ``def``
dependency in a worker thread, a thread hop per dependency per request.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from nats.js import JetStreamContext

from services.api.settings import ApiSettings
from shared.db.pool import Database


async def database(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


async def api_settings(request: Request) -> ApiSettings:
    settings: ApiSettings = request.app.state.api_settings
    return settings


async def jetstream(request: Request) -> JetStreamContext | None:
    """None when the API runs without a message bus (a route then answers 503)."""
    js: JetStreamContext | None = request.app.state.jetstream
    return js


Db = Annotated[Database, Depends(database)]
SettingsDep = Annotated[ApiSettings, Depends(api_settings)]
MaybeJetStream = Annotated[JetStreamContext | None, Depends(jetstream)]
