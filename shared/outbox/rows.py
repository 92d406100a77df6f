"""An outbox row: its partition, its NOTIFY channel, its column values (shared/outbox)."""

from __future__ import annotations

import zlib

from shared.events.envelope import Envelope
from shared.telemetry import current_traceparent

PARTITIONS = 16


def partition_of(aggregate: str) -> int:
    return zlib.crc32(aggregate.encode()) % PARTITIONS


def notify_channel(source: str) -> str:
    """The NOTIFY channel of one event source (``corral/api`` → ``corral_outbox_api``).

    Each service's relay wakes only for its own service's writes, so five relays do not
    all race for every row; they still share every partition, and each polls anyway.
    """
    return "corral_outbox_" + source.rsplit("/", 1)[-1]


OutboxRow = tuple[str, str, str, int, bytes, dict[str, str]]


def outbox_row(event: Envelope, aggregate: str) -> OutboxRow:
    """The values of ``event``'s outbox row, in the order of the table's columns
    (event_id, subject, aggregate, part, payload, headers), stamped with the current
    trace unless it carries one.

    For ``append`` and ``append_many``, and for a statement that writes a state change
    and its event at once (the API's submit: ``services/api/sql/jobs.sql``), which must
    also ``pg_notify(notify_channel(event.source), part::text)``: the relay that hears
    it publishes that partition without first counting every partition's rows."""
    traceparent = event.traceparent or current_traceparent()
    if traceparent and event.traceparent is None:
        event = event.model_copy(update={"traceparent": traceparent})
    headers = {"traceparent": traceparent} if traceparent else {}
    return (
        event.id,
        event.nats_subject,
        aggregate,
        partition_of(aggregate),
        event.model_dump_json().encode(),
        headers,
    )


INSERT = """INSERT INTO corral.outbox (event_id, subject, aggregate, part, payload, headers)
             VALUES ($1, $2, $3, $4, $5, $6)"""
