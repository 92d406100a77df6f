"""Prometheus metrics every service shares, and the ``/metrics`` endpoint that serves them.

Each process exposes its own registry: the background services on their health port
(``/healthz``, ``/readyz``, ``/metrics``), the API on its own port. Metrics of one
service alone live beside it (``services/<name>/metrics.py``); the ones here are
recorded by the shared runtime, so every service has them:

- HTTP (the API): ``corral_http_requests_total{method,route,status}`` and
  ``corral_http_request_duration_seconds{method,route}``, by route *template*
  (``/api/v1/jobs/{job_id}``), never by raw path, so ids do not explode the series;
- the bus: ``corral_events_published_total{type}`` (the outbox relay),
  ``corral_events_consumed_total{consumer,outcome}`` with outcome ``acked``, ``nacked``
  (to be redelivered) or ``dead_lettered``, ``corral_events_redelivered_total{consumer}``
  (deliveries after the first) and ``corral_event_handling_seconds{consumer}``;
- the outbox: ``corral_outbox_lag_seconds`` (commit to publish, per event),
  ``corral_outbox_unsent_events`` and ``corral_outbox_oldest_unsent_seconds`` (the
  backlog as this process's relay last saw it; every relay sees the whole outbox).

``deploy/grafana/corral.json`` charts them; tests/deploy/test_grafana_dashboard.py holds the
dashboard to the names defined here.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

# `_created` series double every counter for a timestamp Prometheus does not need.
disable_created_metrics()  # type: ignore[no-untyped-call]

HTTP_REQUESTS = Counter(
    "corral_http_requests",
    "HTTP requests answered, by route template and status.",
    ["method", "route", "status"],
)
HTTP_DURATION = Histogram(
    "corral_http_request_duration_seconds",
    "Time to answer an HTTP request (a streamed response: until it ends).",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
)
EVENTS_PUBLISHED = Counter(
    "corral_events_published", "Events the outbox relay published to JetStream, by type.", ["type"]
)
EVENTS_CONSUMED = Counter(
    "corral_events_consumed",
    "Deliveries a consumer settled: acked, nacked (redelivered later) or dead_lettered.",
    ["consumer", "outcome"],
)
EVENTS_REDELIVERED = Counter(
    "corral_events_redelivered", "Deliveries that were not their message's first.", ["consumer"]
)
EVENT_HANDLING = Histogram(
    "corral_event_handling_seconds",
    "Time a consumer's handler took on one event.",
    ["consumer"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0),
)
OUTBOX_LAG = Histogram(
    "corral_outbox_lag_seconds",
    "From an event's commit (its outbox row) to its publish on JetStream.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0),
)
OUTBOX_UNSENT = Gauge("corral_outbox_unsent_events", "Committed events not yet published.")
OUTBOX_OLDEST_UNSENT = Gauge(
    "corral_outbox_oldest_unsent_seconds", "Age of the oldest committed event not yet published."
)


def event_type_of(subject: str) -> str:
    """``corral.job.submitted.job-01…`` → ``job.submitted`` (a bounded label value)."""
    parts = subject.split(".")
    return ".".join(parts[1:3]) if len(parts) >= 3 else subject


def exposition() -> bytes:
    return generate_latest(REGISTRY)


async def metrics_endpoint(_: Request) -> Response:
    return Response(exposition(), media_type=CONTENT_TYPE_LATEST)


def metrics_route() -> Route:
    return Route("/metrics", metrics_endpoint)


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class HttpMetrics:
    """ASGI middleware counting requests and timing them by route template.

    Plain ASGI rather than Starlette's ``BaseHTTPMiddleware``: it costs microseconds per
    request and leaves streamed responses alone. The route is known only after routing,
    from ``scope["route"]``; a request that matched no route counts as ``unmatched``.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client gets if the app dies before answering

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope["method"]
            HTTP_REQUESTS.labels(method, route, str(status)).inc()
            HTTP_DURATION.labels(method, route).observe(time.perf_counter() - started)
