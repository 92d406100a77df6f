"""The API's server spans: each request is the root of a job's trace, or continues the
caller's (W3C ``traceparent``), and the events it appends carry that trace on.

FastAPI makes them itself (its native OpenTelemetry support, on as soon as a tracer
provider is set, as ``shared/telemetry.py`` does in every service): a SERVER span per
request named after its route, with the HTTP semantic-convention attributes. What is
set here:

- no ``operation_spans`` (one span each for dependencies, the endpoint and
  serialization): the job's traceparent, stored at submit, is the request's own span, so
  a job's trace is the story docs/observability.md draws (the scheduler's decision a
  child of the submit), and a request costs one span, not four;
- ``metrics`` and ``logs`` off: HTTP metrics are Prometheus's (``shared/metrics.py``:
  ``HttpMetrics``) and logs are the services' own (``shared/logs.py``);
- health and metrics endpoints untraced (probes every few seconds, no job in them), and
  requests to services through ``/serve/`` (an application's traffic, not Corral's: a
  span each would cost more than the gateway itself).

It replaced opentelemetry-instrumentation-fastapi, which made the same server span from
an outer middleware and switched FastAPI's own off: with both wrapped around every
request, telemetry took about a sixth of the API's CPU per submit (py-spy under
``bench.api``), most of it working out attributes for spans that were not recorded.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from fastapi.telemetry import TelemetryConfig

UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
SERVE_PREFIX = "/serve/"


def telemetry_config() -> TelemetryConfig:
    """FastAPI's telemetry as the API runs it (see the module docstring)."""
    return {
        "tracing": True,
        "operation_spans": False,
        "metrics": False,
        "logs": False,
        "exclude": _untraced,
    }


def _untraced(scope: MutableMapping[str, Any]) -> bool:
    path = scope.get("path", "")
    return path in UNTRACED_PATHS or path.startswith(SERVE_PREFIX)
