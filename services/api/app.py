"""Composition root of the API service.

``create_app`` builds the FastAPI application around already-open resources, so tests
can serve it in-process; ``main`` opens the resources (pool, bus, relay), bootstraps
the admin token and serves HTTP under one TaskGroup with the outbox relay.
"""

from __future__ import annotations

import asyncio

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from nats.aio.client import Client as NatsClient
from prometheus_client import CONTENT_TYPE_LATEST

from services.api.alerts.routes import router as alerts_router
from services.api.audit import AuditLog
from services.api.body_limit import BodySizeLimit
from services.api.cluster.routes import router as cluster_router
from services.api.database_problems import install_database_handlers
from services.api.docs_pages import router as docs_pages_router
from services.api.events.hub import EventHub
from services.api.events.repository import EventRepository
from services.api.events.routes import router as events_router
from services.api.events.scope import Scopes
from services.api.integrations import run_integrations
from services.api.interactive.repository import InteractiveRepository
from services.api.interactive.routes import router as interactive_router
from services.api.jobs.dependencies import AskScheduler
from services.api.jobs.logs import AskNode
from services.api.jobs.repository import JobRepository
from services.api.jobs.routes import router as jobs_router
from services.api.jobs.submission import shape_cache
from services.api.models.routes import router as models_router
from services.api.openapi import install_openapi
from services.api.portal.repository import SessionRepository
from services.api.portal.routes import install_portal
from services.api.problems import install_problem_handlers
from services.api.rate_limit import RateLimit
from services.api.serving.controller import ControllerLease, ServiceController
from services.api.serving.gateway import install_gateway
from services.api.serving.routes import router as services_router
from services.api.settings import Settings
from services.api.storage.routes import router as storage_router
from services.api.tenants.auth import TokenCache, bootstrap_admin
from services.api.tenants.repository import TenantRepository
from services.api.tenants.routes import router as tenants_router
from services.api.tracing import telemetry_config
from services.api.webhooks.routes import router as webhooks_router
from shared.db.pool import Database
from shared.dry_run import DRY_RUN_SUBJECT
from shared.gc_tuning import tune_garbage_collector
from shared.metrics import HttpMetrics, exposition
from shared.service import Health, ServiceResources, every, run_service, serve_http, service_resources

# How often an API process deletes the audit rows past their retention (audit.py, and
# the interactive sessions' audit), and the portal's expired sessions.
AUDIT_SWEEP_EVERY_S = 3600.0


def create_app(
    db: Database,
    health: Health,
    settings: Settings,
    ask_scheduler: AskScheduler | None = None,
    event_hub: EventHub | None = None,
    ask_node: AskNode | None = None,
    nats: NatsClient | None = None,
) -> FastAPI:
    """``ask_scheduler`` sends a dry-run question to the scheduler and returns its answer
    (core NATS request/reply in the service; without it, dry runs answer 503);
    ``event_hub`` feeds ``GET /api/v1/events`` (without it, 503); ``ask_node`` asks a
    node for a piece of a task's log (``logs.py``; without it, logs answer 503); ``nats``
    carries interactive sessions' streams to nodes (``interactive/``; without it, they
    answer 503)."""
    app = FastAPI(
        title="Corral API",
        version="1",
        description="Submit and follow training jobs on a Corral GPU cluster.",
        # Each request is a server span, the root of the trace its events continue.
        telemetry=telemetry_config(),
    )
    # What the routes' dependencies hand out (services/api/dependencies.py and each
    # slice's dependencies.py): routes never read app.state themselves.
    app.state.db = db
    app.state.api_settings = settings.api
    app.state.token_cache = tokens = TokenCache()
    app.state.shapes = shape_cache(JobRepository(db))
    # Runs in every API process, acts in the one holding its lock (serving/controller.py);
    # started by run_api, woken by the services routes.
    database = settings.common.database
    app.state.service_controller = ServiceController(
        db, app.state.shapes, ControllerLease(database.url, password_file=database.password_file)
    )
    app.state.ask_scheduler = ask_scheduler
    app.state.ask_node = ask_node
    app.state.interactive_nats = nats
    app.state.event_hub = event_hub
    app.state.jetstream = event_hub.js if event_hub is not None else None
    app.state.webhook_wake = asyncio.Event()  # set when a delivery is queued by hand
    app.state.webhooks_added = asyncio.Event()  # set when a webhook is created here
    # Innermost: it sees the route matched and the principal verified (audit.py).
    app.add_middleware(AuditLog, repo=TenantRepository(db))
    app.add_middleware(BodySizeLimit, max_bytes=settings.api.max_body_bytes)
    # Outside the audit log: a 429 reaches no route, so it changes nothing to record.
    app.add_middleware(
        RateLimit,
        per_s=settings.api.rate_limit_per_s,
        burst=settings.api.rate_limit_burst,
        submit_per_s=settings.api.submit_rate_limit_per_s,
        submit_burst=settings.api.submit_rate_limit_burst,
    )
    app.add_middleware(HttpMetrics)
    # Outermost: /serve/ requests pass none of the above (serving/gateway.py says why).
    app.state.serve_pool = install_gateway(app, db)
    install_problem_handlers(app)
    install_database_handlers(app)
    # One router per slice (services/api/README.md).
    for router in (
        jobs_router,
        cluster_router,
        alerts_router,
        events_router,
        webhooks_router,
        tenants_router,
        interactive_router,
        models_router,
        services_router,
        storage_router,
        docs_pages_router,
    ):
        app.include_router(router)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok", "service": "api"})

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        ready, checks = await health.readiness()
        return JSONResponse(
            {"ready": ready, "service": "api", "checks": checks}, status_code=200 if ready else 503
        )

    # The web portal, after the API's routes: its pages are everything outside /api/.
    install_portal(app, db, settings.api, tokens)
    install_openapi(app)  # last: it describes every route's errors (openapi.py)
    return app


async def serve(settings: Settings) -> None:
    async with service_resources("api", settings.common) as res:
        await run_api(res, settings)


async def run_api(res: ServiceResources, settings: Settings) -> None:
    tenants = TenantRepository(res.db)
    await bootstrap_admin(tenants, settings.admin_token_path)
    timeout_s = settings.api.dry_run_timeout_s

    async def ask_scheduler(question: bytes) -> bytes:
        return await res.bus.request(DRY_RUN_SUBJECT, question, timeout_s)

    async def ask_node(subject: str, question: bytes) -> bytes:
        return await res.bus.request(subject, question, settings.api.node_logs_timeout_s)

    scopes = Scopes(EventRepository(res.db))
    hub = EventHub(res.bus.js, scopes, settings.api.sse_queue_limit, settings.api.sse_tail_idle_s)
    app = create_app(res.db, res.health, settings, ask_scheduler, hub, ask_node, res.bus.nc)
    # The app's routes, models and schemas live as long as the process: frozen, no full
    # collection walks them again (a 40 ms pause every ~600 submits): shared/gc_tuning.py.
    tune_garbage_collector()
    async with asyncio.TaskGroup() as tg:
        if res.relay is not None:
            tg.create_task(res.relay.run(), name="outbox-relay")
        tg.create_task(res.liveness.run(), name="liveness")
        api = settings.api
        tg.create_task(serve_http(app, api.host, api.port, "api", reuse_port=api.reuse_port), name="http")
        tg.create_task(app.state.service_controller.run(), name="service-controller")
        retention_s = settings.api.audit_retention_days * 86400

        async def forget_old_audit() -> int:
            return await tenants.forget_old_audit(retention_s)

        tg.create_task(
            every(AUDIT_SWEEP_EVERY_S, forget_old_audit, "audit log retention"), name="audit-retention"
        )
        sessions = SessionRepository(res.db)
        tg.create_task(
            every(AUDIT_SWEEP_EVERY_S, sessions.forget_expired, "portal session expiry"),
            name="portal-sessions",
        )
        interactive = InteractiveRepository(res.db)

        async def forget_old_interactive() -> int:
            return await interactive.forget_old(retention_s)

        tg.create_task(
            every(AUDIT_SWEEP_EVERY_S, forget_old_interactive, "interactive sessions' audit retention"),
            name="interactive-retention",
        )
        integrations = run_integrations(
            res.db,
            res.bus,
            res.dead_letters,
            settings.api,
            hub,
            app.state.webhook_wake,
            app.state.webhooks_added,
        )
        tg.create_task(integrations, name="integrations")


def main() -> int:
    settings = Settings()
    return run_service("api", lambda: serve(settings))
