"""The interactive slice's routes: sessions and their audit, their WebSocket, the proxy."""

from __future__ import annotations

from fastapi import APIRouter

from services.api.interactive import routes_proxy, routes_sessions, routes_stream

router = APIRouter()
for part in (routes_sessions, routes_stream, routes_proxy):
    router.include_router(part.router)
