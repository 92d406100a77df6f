"""Tracing: OpenTelemetry set-up and W3C ``traceparent`` propagation through NATS.

One job's submit → schedule → launch → exit is one trace across processes:

- the API's request is a server span (FastAPI's own telemetry, ``services/api/tracing.py``);
- ``outbox.append`` stores the current ``traceparent`` with the event (row and envelope);
- the relay publishes each row in a ``send`` span (PRODUCER) whose context replaces the
  stored one in the NATS header;
- the consumer loop handles each message in a ``process`` span (CONSUMER) continued from
  that header, so events the handler appends belong to the same trace;
- the scheduler, which decides in cycles rather than in handlers, continues each job's
  trace from the ``traceparent`` stored with the job at submit (``api.jobs``).

Spans carry the OpenTelemetry messaging attributes (``messaging.system``,
``messaging.operation.type``, ``messaging.destination.name``, ``messaging.message.id``,
``messaging.consumer.group.name``) and ``corral.job.id`` where a job is concerned.

Export is off by default. Spans then record nothing but still exist, so context
propagates; and under an unsampled parent the send, process, schedule and start-task
spans are skipped altogether: a message carries its parent's ``traceparent`` on, and
the trace id every log line shows is the same (``_unrecorded``). A caller's sampled
trace is still followed, hop by hop. Set
``CORRAL_TELEMETRY_EXPORTER=otlp`` to send them over OTLP/HTTP; where, how and what is
sampled is then the standard ``OTEL_EXPORTER_OTLP_*``, ``OTEL_BSP_*``,
``OTEL_TRACES_SAMPLER`` and ``OTEL_RESOURCE_ATTRIBUTES`` variables, read by the SDK.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
)
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from shared.logs import setup_logging
from shared.settings import TelemetrySettings

_PROPAGATOR = TraceContextTextMapPropagator()
# How long a stopping service waits for its last spans to leave.
FLUSH_TIMEOUT_MS = 3000

tracer = trace.get_tracer("corral")
_consumer_tracer = trace.get_tracer("corral.bus")  # the consumer loop's spans (shared/bus)
# The process's provider, set by ``setup_telemetry``, when it exports nothing: then a span
# under an unsampled parent (or none) is recorded by no one, and the messaging spans are
# skipped (``_unrecorded``).
_EXPORTING_NOTHING: TracerProvider | None = None


def setup_telemetry(service: str, settings: TelemetrySettings) -> TracerProvider:
    """Logging and the process's tracer provider; call ``shutdown_telemetry`` at exit."""
    global _EXPORTING_NOTHING  # the process's one provider, set once
    setup_logging(service, settings.log_level, settings.log_format)
    provider = tracer_provider(service, settings.exporter)
    trace.set_tracer_provider(provider)
    _EXPORTING_NOTHING = provider if settings.exporter == "none" else None
    return provider


def _unrecorded(parent_sampled: bool) -> bool:
    """Whether nothing would record a span under a parent whose sampled flag is
    ``parent_sampled``: the process exports nothing and the parent is not sampled.

    Such a span would only get new ids, which nobody reads (log lines carry the trace
    id, the same either way). The messaging spans are then skipped, a dozen per job,
    each with its CPU (docs/performance.md); a message keeps its parent's ``traceparent``. A
    provider installed since ``setup_telemetry`` (a test's) is followed as it is."""
    return (
        not parent_sampled
        and _EXPORTING_NOTHING is not None
        and trace.get_tracer_provider() is _EXPORTING_NOTHING
    )


def _sampled(context: otel_context.Context | None) -> bool:
    """Whether the parent in ``context`` (as extracted from a ``traceparent``) is sampled."""
    return context is not None and trace.get_current_span(context).get_span_context().trace_flags.sampled


def tracer_provider(service: str, exporter: str) -> TracerProvider:
    """The spans of ``service``, sent to ``exporter`` (none, console or otlp).

    Exporting nothing, record nothing: spans still get ids, which travel in the
    traceparents stored with jobs and events and appear in log lines, but are not
    filled with attributes no one will read (a tenth of a submit's CPU in the API). A
    parent that says "sampled" (a client's own trace) is still followed.
    """
    root = ALWAYS_OFF if exporter == "none" else ALWAYS_ON
    provider = TracerProvider(
        resource=Resource.create({"service.name": f"corral-{service}"}), sampler=ParentBased(root)
    )
    if exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    elif exporter == "otlp":
        # Imported here: the exporter pulls in protobuf, which a service exporting
        # nothing need not load.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def shutdown_telemetry(provider: TracerProvider) -> None:
    """Send the spans still queued (bounded wait), then stop the processors."""
    provider.force_flush(FLUSH_TIMEOUT_MS)
    provider.shutdown()


def current_traceparent() -> str | None:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def extract_context(headers: Mapping[str, str]) -> otel_context.Context:
    return _PROPAGATOR.extract({k.lower(): v for k, v in headers.items()})


def destination_template(subject: str) -> str:
    """``corral.job.submitted.job-01…`` → ``corral.job.submitted``: span names must not
    carry ids (one name per kind of operation), the attributes do."""
    return subject.rsplit(".", 1)[0] if subject.count(".") >= 3 else subject


@contextmanager
def send_span(subject: str, message_id: str, headers: dict[str, str]) -> Iterator[dict[str, str]]:
    """A PRODUCER span continuing ``headers``' trace; yields the headers to publish with
    (the same, with this span's ``traceparent``; unchanged when nothing would record the
    span: ``_unrecorded``)."""
    context = extract_context(headers)
    if _unrecorded(_sampled(context)):
        yield dict(headers)
        return
    with tracer.start_as_current_span(
        f"send {destination_template(subject)}",
        context=context,
        kind=trace.SpanKind.PRODUCER,
        attributes={
            "messaging.system": "nats",
            "messaging.operation.type": "send",
            "messaging.destination.name": subject,
            "messaging.destination.template": destination_template(subject),
            "messaging.message.id": message_id,
        },
    ):
        traceparent = current_traceparent()
        yield {**headers, "traceparent": traceparent} if traceparent else dict(headers)


@contextmanager
def consume_span(
    name: str, headers: Mapping[str, str], attributes: Mapping[str, str | int]
) -> Iterator[None]:
    """A CONSUMER span continuing ``headers``' trace, around the handling of a message;
    when nothing would record it (``_unrecorded``), only the message's context, so what
    the handler appends continues the same trace."""
    context = extract_context(headers)
    if _unrecorded(_sampled(context)):
        token = otel_context.attach(context)
        try:
            yield
        finally:
            otel_context.detach(token)
        return
    with _consumer_tracer.start_as_current_span(
        name, context=context, kind=trace.SpanKind.CONSUMER, attributes=attributes
    ):
        yield


@contextmanager
def continue_trace(
    traceparent: str | None, name: str, attributes: Mapping[str, str | int | float] | None = None
) -> Iterator[None]:
    """An INTERNAL span continuing a stored ``traceparent`` (a new trace when there is
    none); when nothing would record it, only the stored context (``_unrecorded``)."""
    context = extract_context({"traceparent": traceparent}) if traceparent else None
    if _unrecorded(_sampled(context)):
        token = otel_context.attach(context) if context is not None else None
        try:
            yield
        finally:
            if token is not None:
                otel_context.detach(token)
        return
    with tracer.start_as_current_span(name, context=context, attributes=attributes):
        yield


@contextmanager
def span_in_job_trace(
    traceparent: str | None, name: str, attributes: Mapping[str, str | int] | None = None
) -> Iterator[None]:
    """A span under the current one — or, where there is none (a reconcile loop acting
    on its own), continuing the job's stored trace, so the job's trace stays whole."""
    current = trace.get_current_span().get_span_context()
    if current.is_valid:
        if _unrecorded(current.trace_flags.sampled):
            yield  # nothing would record it: the current context goes on
            return
        with tracer.start_as_current_span(name, attributes=attributes):
            yield
    else:
        with continue_trace(traceparent, name, attributes):
            yield
