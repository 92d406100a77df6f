"""Observability across every hop, with every service a real process.

The stack exports its spans over OTLP (the SDK's own exporter, configured by the
standard ``OTEL_*`` variables) to a real OTLP/HTTP receiver in the test
(``tests/fixtures/otlp_collector.py``); logs are JSON. One job then shows:

- its submit → schedule → launch → exit as one connected trace, across the API,
  scheduler, launcher and node agent, through NATS headers and the outbox;
- every service's ``/metrics`` with the figures of what it just did;
- log lines that carry the job's id and its trace's id.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.stack import Stack, submit, wait_state
from tests.fixtures.otlp_collector import CollectedSpan, OtlpCollector

SUBMIT_SPAN = "POST /api/v1/jobs"


@pytest.fixture
async def traced_stack(
    database_url: str,
    nats_url: str,
    tmp_path: Path,
    otlp_collector: OtlpCollector,
) -> AsyncIterator[Stack]:
    env = {
        "CORRAL_DATABASE_URL": database_url,
        "CORRAL_NATS_URL": nats_url,
        "CORRAL_TELEMETRY_EXPORTER": "otlp",
        "CORRAL_TELEMETRY_LOG_FORMAT": "json",
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_collector.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # milliseconds: spans leave promptly
    }
    async with Stack(tmp_path / "home", env).running() as stack:
        yield stack


async def wait_for_span(
    collector: OtlpCollector, trace_id: str, service: str | None, name: str, timeout_s: float = 20.0
) -> None:
    """Until the trace has a span ``name`` from ``service`` (None: from any)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(service in (None, s.service) and s.name == name for s in collector.trace(trace_id)):
            return
        await asyncio.sleep(0.1)
    names = sorted({f"{s.service}: {s.name}" for s in collector.trace(trace_id)})
    raise AssertionError(f"no span {name!r} in trace {trace_id}; it has {names}")


async def test_one_job_is_one_connected_trace_with_metrics_and_logs(
    traced_stack: Stack,
    otlp_collector: OtlpCollector,
) -> None:
    async with traced_stack.client() as http:
        job_id = await submit(http, "echo traced")
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"})
        assert job["state"] == "SUCCEEDED", job
        api_metrics = (await http.get("/metrics")).text

    [root] = await _submit_span(otlp_collector, job_id)
    assert root.service == "corral-api"
    assert root.kind == "SERVER"
    assert root.parent_span_id == ""
    # The job's end closes the story (the scheduler only watches events go by, to wake
    # its cycle: it makes no span of them). Any service's relay may be the one to send it.
    await wait_for_span(otlp_collector, root.trace_id, None, "send corral.job.succeeded")
    # Connected: one root, and every other span's parent is in the trace. Spans come from
    # seven processes in batches, a parent after its children: wait for the stragglers.
    orphans = await _orphans(otlp_collector, root)
    assert not orphans, f"spans whose parent never arrived: {orphans}"
    spans = otlp_collector.trace(root.trace_id)
    assert [s for s in spans if not s.parent_span_id] == [root]

    # Every hop, in every service that took part. A "send" is the outbox relay's, and
    # any service's relay may publish any row, so only its name is fixed.
    names = {s.name for s in spans}
    by_name = {(s.service, s.name): s for s in spans}
    sends = [
        "send corral.job.submitted",
        "send corral.job.scheduled",
        "send corral.task.assigned",
        "send corral.task.started",
        "send corral.job.running",
        "send corral.task.exited",
        "send corral.job.succeeded",
    ]
    steps = [
        ("corral-scheduler", "schedule"),
        ("corral-launcher", "process corral.job.scheduled"),
        ("corral-agent-local", "process corral.task.assigned"),
        ("corral-agent-local", "start task"),
    ]
    missing = [name for name in sends if name not in names] + [step for step in steps if step not in by_name]
    assert not missing, f"missing {missing}; the trace has {sorted(by_name)}"
    # Each hop's parent is the previous step of the story: the scheduler's decision
    # continues the submit (not its own cycle), the agent's report continues its start.
    assert by_name[("corral-scheduler", "schedule")].parent_span_id == root.span_id
    parent = {s.span_id: s for s in spans}
    [exited] = [s for s in spans if s.name == "send corral.task.exited"]
    assert _ancestors(exited, parent)[:2] == ["start task", "process corral.task.assigned"]

    # Messaging semantic conventions on both ends of every NATS hop.
    for span in spans:
        if span.kind in ("PRODUCER", "CONSUMER"):
            assert span.attributes["messaging.system"] == "nats"
            assert str(span.attributes["messaging.destination.name"]).startswith("corral.")
            assert span.attributes["messaging.message.id"]
            assert span.attributes["messaging.operation.type"] == (
                "send" if span.kind == "PRODUCER" else "process"
            )
    consumed = by_name[("corral-launcher", "process corral.job.scheduled")]
    assert consumed.attributes["messaging.consumer.group.name"] == "launcher"
    assert consumed.attributes["corral.job.id"] == job_id
    # The launcher decided the job when the agent reported the task's end (its NOTIFY
    # carries the report's trace): job.succeeded is sent in the trace of the task's start too.
    [succeeded] = [s for s in spans if s.name == "send corral.job.succeeded"]
    assert "start task" in _ancestors(succeeded, parent)

    await _check_metrics(traced_stack, api_metrics, job["attempts"][0]["classification"])
    _check_json_logs(traced_stack, job_id, root.trace_id)


async def _submit_span(collector: OtlpCollector, job_id: str) -> list[CollectedSpan]:
    """The API's server span for this job's submit (its trace holds the job's ``schedule``)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        scheduled = [
            s for s in collector.spans if s.name == "schedule" and s.attributes.get("corral.job.id") == job_id
        ]
        if scheduled:
            trace = collector.trace(scheduled[0].trace_id)
            roots = [s for s in trace if s.name == SUBMIT_SPAN]
            if roots:
                return roots
        await asyncio.sleep(0.1)
    raise AssertionError(f"no trace of job {job_id}: {sorted({s.name for s in collector.spans})}")


async def _orphans(collector: OtlpCollector, root: CollectedSpan, timeout_s: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        spans = collector.trace(root.trace_id)
        ids = {s.span_id for s in spans}
        orphans = [f"{s.service}: {s.name}" for s in spans if s is not root and s.parent_span_id not in ids]
        if not orphans or time.monotonic() > deadline:
            return orphans
        await asyncio.sleep(0.2)


def _ancestors(span: CollectedSpan, parent: dict[str, CollectedSpan]) -> list[str]:
    names = []
    while span.parent_span_id in parent:
        span = parent[span.parent_span_id]
        names.append(span.name)
    return names


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls)


def _per_gpu(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str
) -> dict[str, tuple[str, float]]:
    """``name``'s sample of each GPU, by its UUID: its ``simulated`` label and its value."""
    per_gpu = {}
    for (n, ls), v in samples.items():
        if n == name:
            labels = dict(ls)
            per_gpu[labels["UUID"]] = (labels["simulated"], v)
    return per_gpu


async def _check_metrics(stack: Stack, api_metrics: str, classification: str) -> None:
    api = _samples(api_metrics)
    assert _value(api, "corral_http_requests_total", route="/api/v1/jobs", method="POST", status="201") == 1
    assert _value(api, "corral_http_request_duration_seconds_count", route="/api/v1/jobs/{job_id}") >= 1

    ports = json.loads((stack.home / "run" / "health-ports.json").read_text())
    async with httpx.AsyncClient(timeout=5) as http:
        scraped = {
            name: _samples((await http.get(f"http://127.0.0.1:{port}/metrics")).text)
            for name, port in ports.items()
            if name != "api"
        }
    scheduler, launcher, agent = scraped["scheduler"], scraped["launcher"], scraped["agent"]
    assert _value(launcher, "corral_events_consumed_total", consumer="launcher", outcome="acked") >= 1
    assert _value(scheduler, "corral_scheduler_leader") == 1
    assert _value(scheduler, "corral_scheduler_placements_total") >= 1
    assert _value(scheduler, "corral_scheduler_cycle_duration_seconds_count") >= 1
    # The agent's reports made the job RUNNING; the launcher ended it on the last one's word.
    assert _value(agent, "corral_launch_latency_seconds_count") == 1
    assert _value(agent, "corral_job_start_latency_seconds_count") == 1
    assert _value(launcher, "corral_jobs_ended_total", state="SUCCEEDED") == 1
    assert _value(agent, "corral_task_exits_total", classification=classification) == 1
    # Every relay shares the whole outbox, so the cluster's total is what counts.
    everyone = [api, *scraped.values()]
    for event_type in ("job.submitted", "job.scheduled", "task.started", "job.running", "job.succeeded"):
        assert sum(_value(m, "corral_events_published_total", type=event_type) for m in everyone) >= 1
    assert _value(agent, "corral_events_consumed_total", outcome="acked") >= 1
    # The monitor's scrape is the cluster's GPUs plus its own process metrics: a reading
    # of every GPU the API lists, from simulated GPUs, which read 0 % (idle) when no
    # fault script makes them busy, whatever runs on them.
    async with stack.client() as http:
        gpus = [gpu["uuid"] for gpu in (await http.get("/api/v1/gpus")).json()["items"]]
    assert len(gpus) == 8  # `make up`'s one node and its default of 8 simulated GPUs
    assert _per_gpu(scraped["monitor"], "DCGM_FI_DEV_GPU_UTIL") == dict.fromkeys(gpus, ("true", 0.0))
    assert ("corral_outbox_unsent_events", frozenset()) in scraped["monitor"]
    assert ("corral_outbox_unsent_events", frozenset()) in scraped["alerter"]
    assert sum(_value(m, "corral_outbox_lag_seconds_count") for m in everyone) >= 5


def _check_json_logs(stack: Stack, job_id: str, trace_id: str) -> None:
    records = []
    for path in (stack.home / "logs" / "services").glob("*.log"):
        for line in path.read_text().splitlines():
            if line.startswith("{"):
                records.append(json.loads(line))
    assert records, "no JSON log lines"
    assert all({"time", "level", "logger", "message", "service"} <= r.keys() for r in records)
    about_job = [r for r in records if r.get("job_id") == job_id]
    assert about_job, "no log line names the job"
    assert any(r.get("trace_id") == trace_id for r in about_job), about_job
