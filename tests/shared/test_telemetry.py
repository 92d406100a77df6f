"""Logs, HTTP metrics and span naming, in one process (the e2e test shows them across
real processes: tests/e2e/test_observability.py)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry import trace
from prometheus_client import REGISTRY
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from shared import telemetry
from shared.logs import ContextFilter, TextFormatter, bound_job, json_formatter
from shared.metrics import HttpMetrics, event_type_of
from shared.service import Health, health_routes
from shared.telemetry import (
    consume_span,
    continue_trace,
    current_traceparent,
    destination_template,
    send_span,
    span_in_job_trace,
    tracer_provider,
)
from tests.tracing import global_tracer_provider


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, logging.StreamHandler[io.StringIO]]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter("launcher"))
    logger = logging.getLogger("corral.test.logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, handler
    logger.removeHandler(handler)


def _lines(handler: logging.StreamHandler[io.StringIO]) -> list[str]:
    return handler.stream.getvalue().splitlines()


def test_json_lines_carry_the_service_trace_and_job(
    captured: tuple[logging.Logger, logging.StreamHandler[io.StringIO]],
) -> None:
    logger, handler = captured
    handler.setFormatter(json_formatter())
    with global_tracer_provider(), trace.get_tracer("t").start_as_current_span("handle") as span:
        with bound_job("job-7"):
            logger.info("attempt %s ended", "att-1", extra={"attempt_id": "att-1"})
        logger.warning("outside the job")
    logger.info("no span, no job")
    inside, after, bare = (json.loads(line) for line in _lines(handler))
    context = span.get_span_context()
    assert inside["message"] == "attempt att-1 ended"
    assert inside["level"] == "INFO"
    assert inside["logger"] == "corral.test.logs"
    assert inside["service"] == "launcher"
    assert inside["job_id"] == "job-7"
    assert inside["attempt_id"] == "att-1"
    assert inside["trace_id"] == format(context.trace_id, "032x")
    assert inside["span_id"] == format(context.span_id, "016x")
    assert inside["time"].endswith("+00:00")
    assert "job_id" not in after  # the binding ended with its block
    assert after["trace_id"] == inside["trace_id"]
    assert "trace_id" not in bare
    assert "job_id" not in bare


def test_text_lines_name_the_job_once(
    captured: tuple[logging.Logger, logging.StreamHandler[io.StringIO]],
) -> None:
    logger, handler = captured
    handler.setFormatter(TextFormatter("launcher"))
    with bound_job("job-7"):
        logger.info("cycle placed %d jobs", 3)
        logger.info("job %s preempted", "job-7")  # already named: not repeated
    placed, preempted = _lines(handler)
    assert placed.endswith("launcher INFO corral.test.logs: cycle placed 3 jobs [job=job-7]")
    assert preempted.endswith("job job-7 preempted")


async def test_http_metrics_count_by_route_template_never_by_raw_path() -> None:
    async def job(request: Request) -> PlainTextResponse:
        if request.path_params["job_id"] == "boom":
            raise RuntimeError("a bug")
        return PlainTextResponse("ok")

    app = HttpMetrics(Starlette(routes=[Route("/api/v1/jobs/{job_id}", job)]))

    def count(route: str, status: str) -> float:
        labels = {"method": "GET", "route": route, "status": status}
        return REGISTRY.get_sample_value("corral_http_requests_total", labels) or 0.0

    before = {
        key: count(*key)
        for key in [("/api/v1/jobs/{job_id}", "200"), ("/api/v1/jobs/{job_id}", "500"), ("unmatched", "404")]
    }
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://corral") as http:
        assert (await http.get("/api/v1/jobs/job-1")).status_code == 200
        assert (await http.get("/api/v1/jobs/job-2")).status_code == 200
        assert (await http.get("/api/v1/jobs/boom")).status_code == 500
        assert (await http.get("/no/such/route")).status_code == 404
    after = {key: count(*key) for key in before}
    assert {key: after[key] - before[key] for key in before} == {
        ("/api/v1/jobs/{job_id}", "200"): 2,
        ("/api/v1/jobs/{job_id}", "500"): 1,
        ("unmatched", "404"): 1,
    }
    seconds = REGISTRY.get_sample_value(
        "corral_http_request_duration_seconds_count", {"method": "GET", "route": "/api/v1/jobs/{job_id}"}
    )
    assert seconds is not None
    assert seconds >= 3


def test_every_health_endpoint_serves_metrics_unless_the_service_brings_its_own() -> None:
    assert [r.path for r in health_routes(Health("scheduler"))] == ["/healthz", "/readyz", "/metrics"]

    async def cluster_metrics(_: Request) -> PlainTextResponse:
        return PlainTextResponse("")

    own = Health("monitor", extra_routes=[Route("/metrics", cluster_metrics)])
    routes = health_routes(own)
    assert [r.path for r in routes] == ["/healthz", "/readyz", "/metrics"]
    assert routes[2].endpoint is cluster_metrics


@pytest.mark.parametrize(
    ("subject", "template", "event_type"),
    [
        ("corral.job.submitted.job-01abc", "corral.job.submitted", "job.submitted"),
        ("corral.task.assigned.node-3", "corral.task.assigned", "task.assigned"),
        ("corral.scheduler.dry_run", "corral.scheduler.dry_run", "scheduler.dry_run"),
    ],
)
def test_span_names_and_metric_labels_never_carry_ids(subject: str, template: str, event_type: str) -> None:
    assert destination_template(subject) == template
    assert event_type_of(subject) == event_type


def test_exporting_nothing_records_nothing_yet_ids_still_travel() -> None:
    quiet, exporting = tracer_provider("api", "none"), tracer_provider("api", "console")
    with quiet.get_tracer("t").start_as_current_span("submit") as span:
        assert not span.is_recording()
        context = span.get_span_context()
        assert context.is_valid  # in log lines, and in the traceparent stored with the job
        assert not context.trace_flags.sampled
        flags = f"{int(context.trace_flags):02x}"
        assert current_traceparent() == f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags}"
    remote = trace.set_span_in_context(
        trace.NonRecordingSpan(
            trace.SpanContext(
                0xABC, 0xDEF, is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)
            )
        )
    )
    with quiet.get_tracer("t").start_as_current_span("continued", context=remote) as child:
        assert child.is_recording()  # a caller's sampled trace is followed
    with exporting.get_tracer("t").start_as_current_span("submit") as recorded:
        assert recorded.is_recording()
    exporting.shutdown()


UNSAMPLED = "00-0000000000000000000000000000abcd-00000000000000ef-00"


def test_exporting_nothing_a_message_keeps_its_parents_traceparent_unless_the_parent_is_sampled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the process's provider exporting nothing (``setup_telemetry``'s default), the
    messaging spans under an unsampled parent are skipped; the context goes on. (The
    global provider is left alone: module-level tracers bind to the first one they see.)"""
    assert not telemetry._unrecorded(parent_sampled=False)  # not the process's provider
    monkeypatch.setattr(telemetry, "_EXPORTING_NOTHING", trace.get_tracer_provider())
    assert telemetry._unrecorded(parent_sampled=False)
    assert not telemetry._unrecorded(parent_sampled=True)  # a caller's sampled trace: spans

    with send_span("corral.job.submitted.job-1", "ev-1", {"traceparent": UNSAMPLED}) as headers:
        assert headers == {"traceparent": UNSAMPLED}  # no span nobody would record
    with consume_span("process corral.job.submitted", {"Traceparent": UNSAMPLED}, {}):
        assert current_traceparent() == UNSAMPLED  # what the handler appends continues it
    with continue_trace(UNSAMPLED, "schedule"):
        assert current_traceparent() == UNSAMPLED
        with span_in_job_trace(None, "start task"):
            assert current_traceparent() == UNSAMPLED
    assert current_traceparent() is None  # and the context is given back
