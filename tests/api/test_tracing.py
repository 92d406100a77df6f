"""The API's server spans (FastAPI's own telemetry, services/api/tracing.py): a submit
continues the caller's trace, the job keeps the request's span, and a request makes that
one span, whether spans are exported or not. Exported through a real collector:
tests/e2e/test_observability.py.
"""

from __future__ import annotations

import httpx
import pytest
from opentelemetry import trace

from services.api.app import create_app
from services.api.settings import Settings
from shared.db.pool import Database
from shared.service import Health
from shared.settings import CommonSettings, TelemetrySettings
from tests.api.test_jobs_api import HELLO
from tests.tracing import global_tracer_provider

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"


async def _traceparent(db: Database, job_id: str) -> list[str]:
    value = await db.fetchval("SELECT traceparent FROM api.jobs WHERE id = $1", job_id)
    return str(value).split("-")


@pytest.mark.parametrize("exporter", ["none", "otlp"])
async def test_a_submit_continues_the_callers_trace_and_the_job_keeps_it(
    db: Database, admin_token: str, exporter: str
) -> None:
    settings = Settings(common=CommonSettings(telemetry=TelemetrySettings(exporter=exporter)))
    app = create_app(db, Health("api", {"postgres": db.ping}), settings)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://corral.test",
        headers={"Authorization": f"Bearer {admin_token}"},
    ) as client:
        with global_tracer_provider() as spans:
            traced = await client.post(
                "/api/v1/jobs", json=HELLO, headers={"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
            )
            fresh = await client.post("/api/v1/jobs", json=HELLO)
            assert (await client.get("/healthz")).status_code == 200
    assert traced.status_code == fresh.status_code == 201
    _, trace_id, span_id, _ = await _traceparent(db, traced.json()["id"])
    assert trace_id == CALLER_TRACE  # the caller's trace, continued
    _, other_trace, _, _ = await _traceparent(db, fresh.json()["id"])
    assert other_trace not in ("0" * 32, CALLER_TRACE)  # no caller: a trace of its own
    finished = spans.get_finished_spans()
    server = [s for s in finished if s.kind == trace.SpanKind.SERVER]
    assert [s.name for s in server] == ["POST /api/v1/jobs"] * 2  # health checks untraced
    assert [s.parent.span_id if s.parent else None for s in server] == [int(CALLER_SPAN, 16), None]
    assert int(span_id, 16) == server[0].context.span_id  # the job continues the request itself
    assert len(finished) == 2  # one span per request: none for its dependencies or endpoint
