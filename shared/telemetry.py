"""OpenTelemetry set-up and W3C ``traceparent`` propagation through NATS headers.

Each service installs a ``TracerProvider`` named after itself. The outbox stores the
current ``traceparent`` with each event; the relay sends it as a NATS header; the
consumer loop continues the trace from it. So one job's submit → schedule → launch →
exit can be followed as one trace across processes.
"""

from __future__ import annotations

import logging
import sys

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from shared.settings import TelemetrySettings

_PROPAGATOR = TraceContextTextMapPropagator()


def setup_telemetry(service: str, settings: TelemetrySettings) -> TracerProvider:
    logging.basicConfig(
        level=settings.log_level.upper(),
        stream=sys.stderr,
        format=f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s",
    )
    provider = TracerProvider(resource=Resource.create({"service.name": f"corral-{service}"}))
    if settings.exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider


def current_traceparent() -> str | None:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def extract_context(headers: dict[str, str]) -> otel_context.Context:
    return _PROPAGATOR.extract({k.lower(): v for k, v in headers.items()})
