"""Composition root of the API service.

``create_app`` builds the FastAPI application around already-open resources, so tests
can serve it in-process; ``main`` opens the resources (pool, bus, relay), bootstraps
the admin token and serves HTTP under one TaskGroup with the outbox relay.
"""

from __future__ import annotations

import asyncio

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from services.api.audit import AuditLog
from services.api.auth import TokenCache, bootstrap_admin
from services.api.body_limit import BodySizeLimit
from services.api.database_problems import install_database_handlers
from services.api.deps import AskScheduler
from services.api.docs_pages import router as docs_pages_router
from services.api.event_hub import EventHub
from services.api.event_scope import Scopes
from services.api.integrations import run_integrations
from services.api.logs import AskNode
from services.api.problems import install_problem_handlers
from services.api.rate_limit import RateLimit
from services.api.repository import ApiRepository
from services.api.routes_alert_rules import router as alert_rules_router
from services.api.routes_alerts import router as alerts_router
from services.api.routes_audit import router as audit_router
from services.api.routes_events import router as events_router
from services.api.routes_groups import router as groups_router
from services.api.routes_jobs import router as jobs_router
from services.api.routes_node_join import router as node_join_router
from services.api.routes_nodes import router as nodes_router
from services.api.routes_services import router as services_router
from services.api.routes_silences import router as silences_router
from services.api.routes_tokens import router as tokens_router
from services.api.routes_users import router as users_router
from services.api.routes_vcs import router as vcs_router
from services.api.routes_webhooks import router as webhooks_router
from services.api.settings import Settings
from services.api.tenant_repository import TenantRepository
from services.api.tracing import telemetry_config
from shared.dry_run import DRY_RUN_SUBJECT
from shared.gc_tuning import tune_garbage_collector
from shared.metrics import HttpMetrics, exposition
from shared.service import Health, ServiceResources, every, run_service, serve_http, service_resources

# How often an API process deletes the audit rows past their retention (audit.py).
AUDIT_SWEEP_EVERY_S = 3600.0


def create_app(
    repo: ApiRepository,
    health: Health,
    settings: Settings,
    ask_scheduler: AskScheduler | None = None,
    event_hub: EventHub | None = None,
    ask_node: AskNode | None = None,
) -> FastAPI:
    """``ask_scheduler`` sends a dry-run question to the scheduler and returns its answer
    (core NATS request/reply in the service; without it, dry runs answer 503);
    ``event_hub`` feeds ``GET /api/v1/events`` (without it, 503); ``ask_node`` asks a
    node for a piece of a task's log (``logs.py``; without it, logs answer 503)."""
    app = FastAPI(
        title="Corral API",
        version="1",
        description="Submit and follow training jobs on a Corral GPU cluster.",
        # Each request is a server span, the root of the trace its events continue.
        telemetry=telemetry_config(),
    )
    app.state.repo = repo
    app.state.token_cache = TokenCache()
    app.state.ask_scheduler = ask_scheduler
    app.state.event_hub = event_hub
    app.state.ask_node = ask_node
    app.state.api_settings = settings.api
    app.state.webhook_wake = asyncio.Event()  # set when a delivery is queued by hand
    app.state.webhooks_added = asyncio.Event()  # set when a webhook is created here
    # Innermost: it sees the route matched and the principal verified (audit.py).
    app.add_middleware(AuditLog, repo=TenantRepository(repo.db))
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
    install_problem_handlers(app)
    install_database_handlers(app)
    app.include_router(jobs_router)
    app.include_router(node_join_router)
    app.include_router(nodes_router)
    app.include_router(alerts_router)
    app.include_router(silences_router)
    app.include_router(alert_rules_router)
    app.include_router(services_router)
    app.include_router(vcs_router)
    app.include_router(events_router)
    app.include_router(webhooks_router)
    app.include_router(tokens_router)
    app.include_router(users_router)
    app.include_router(groups_router)
    app.include_router(audit_router)
    app.include_router(docs_pages_router)

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

    return app


async def serve(settings: Settings) -> None:
    async with service_resources("api", settings.common) as res:
        await run_api(res, settings)


async def run_api(res: ServiceResources, settings: Settings) -> None:
    repo = ApiRepository(res.db)
    audit_log = TenantRepository(res.db)
    await bootstrap_admin(repo, settings.admin_token_path)
    timeout_s = settings.api.dry_run_timeout_s

    async def ask_scheduler(question: bytes) -> bytes:
        return await res.bus.request(DRY_RUN_SUBJECT, question, timeout_s)

    async def ask_node(subject: str, question: bytes) -> bytes:
        return await res.bus.request(subject, question, settings.api.node_logs_timeout_s)

    hub = EventHub(res.bus.js, Scopes(res.db), settings.api.sse_queue_limit, settings.api.sse_tail_idle_s)
    app = create_app(repo, res.health, settings, ask_scheduler, hub, ask_node)
    # The app's routes, models and schemas live as long as the process: frozen, no full
    # collection walks them again (a 40 ms pause every ~600 submits): shared/gc_tuning.py.
    tune_garbage_collector()
    async with asyncio.TaskGroup() as tg:
        if res.relay is not None:
            tg.create_task(res.relay.run(), name="outbox-relay")
        tg.create_task(res.liveness.run(), name="liveness")
        tg.create_task(serve_http(app, settings.api.host, settings.api.port, "api"), name="http")
        retention_s = settings.api.audit_retention_days * 86400

        async def forget_old_audit() -> int:
            return await audit_log.forget_old_audit(retention_s)

        tg.create_task(
            every(AUDIT_SWEEP_EVERY_S, forget_old_audit, "audit log retention"), name="audit-retention"
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
