"""The portal's routes, one module per page, and what the app needs to serve them."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.staticfiles import StaticFiles

from services.api.portal import (
    live,
    routes_alerts,
    routes_home,
    routes_job,
    routes_job_logs,
    routes_jobs,
    routes_nodes,
    routes_services,
    routes_session,
    routes_usage,
    routes_vcs,
)
from services.api.portal.compression import PortalCompression
from services.api.portal.errors import install_not_found_page
from services.api.portal.rendering import STATIC_DIR
from services.api.portal.repository import SessionRepository
from services.api.portal.session import Sessions
from services.api.settings import ApiSettings
from services.api.tenants.auth import TokenCache
from services.api.tenants.repository import TenantRepository
from shared.db.pool import Database

router = APIRouter(include_in_schema=False)
for page in (
    routes_session,
    routes_home,
    routes_jobs,
    routes_job,
    routes_job_logs,
    routes_nodes,
    routes_services,
    routes_vcs,
    routes_alerts,
    routes_usage,
    live,
):
    router.include_router(page.router)


class CachedStaticFiles(StaticFiles):
    """Static files, cached for good: their URLs change with their content
    (``rendering.static_url``)."""

    def file_response(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
        return response


def install_portal(app: FastAPI, db: Database, settings: ApiSettings, tokens: TokenCache) -> None:
    """Serve the portal's pages and static files from ``app`` (after the API's routers)."""
    app.state.portal_sessions = Sessions(
        SessionRepository(db), TenantRepository(db), tokens, settings.portal_session_hours * 3600
    )
    app.state.portal_utilisation = routes_home.UtilisationSeries()
    app.include_router(router)
    app.mount("/static", CachedStaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(PortalCompression)
    install_not_found_page(app)
