"""Logging set-up: one record per line, as text for a terminal or JSON for a log pipeline.

Every record is stamped by ``ContextFilter`` with the service's name, the trace and span
ids of the span current when it was logged (so a log line leads to its trace), and the
job it concerns. The job comes from ``bound_job``: the consumer loop binds the job of
the event it is handling, so a handler's log lines carry it without passing it around;
code acting on a job outside a handler (a scheduling decision) binds it itself.

Text (the default of ``make up``) keeps lines short and adds ``job=`` only when there is
one; JSON (``CORRAL_TELEMETRY_LOG_FORMAT=json``, the Kubernetes default) writes every
field, e.g. ``{"time": ..., "level": "INFO", "logger": "services.launcher.handlers",
"message": ..., "service": "launcher", "trace_id": "4bf9...", "span_id": "00f0...",
"job_id": "job-01..."}``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter

_job_id: ContextVar[str | None] = ContextVar("corral_job_id", default=None)


@contextmanager
def bound_job(job_id: str | None) -> Iterator[None]:
    """Stamp the log records made inside the block (and the tasks it starts) with ``job_id``."""
    token = _job_id.set(job_id)
    try:
        yield
    finally:
        _job_id.reset(token)


def current_job() -> str | None:
    return _job_id.get()


class ContextFilter(logging.Filter):
    """Adds ``service`` always, and ``trace_id``/``span_id``/``job_id`` when there are any."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def filter(self, record: logging.LogRecord) -> bool:
        record.service = self.service
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            record.trace_id = format(span.trace_id, "032x")
            record.span_id = format(span.span_id, "016x")
        job_id = _job_id.get()
        if job_id is not None:
            record.job_id = job_id
        return True


class TextFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__(f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        job_id = getattr(record, "job_id", None)
        return line if job_id is None or job_id in line else f"{line} [job={job_id}]"


def json_formatter() -> JsonFormatter:
    # Fields beyond these four (service, trace_id, span_id, job_id, and any `extra=`)
    # are added by python-json-logger from the record's own attributes.
    return JsonFormatter(
        "%(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",  # ISO 8601 in UTC, to the microsecond
    )


def setup_logging(service: str, level: str, log_format: str) -> None:
    """Replace the root logger's handlers with one stamped stderr handler."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter(service))
    handler.setFormatter(json_formatter() if log_format == "json" else TextFormatter(service))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
