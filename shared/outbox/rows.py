"""An outbox row: its partition, its NOTIFY channel, its column values (shared/outbox)."""

from __future__ import annotations

import zlib

from shared.events.envelope import Envelope
from shared.telemetry import current_traceparent

PARTITIONS = 16

# Who may publish the events of each source, and so relays them: a service's bus
# identity may publish only its own events (shared/bus/identities.py), so its relay
# takes only its own rows. The launcher publishes for the node agents and the
# Kubernetes runner, whose events are about the attempts it owns (a node holds no
# outbox access and no right to publish lifecycle events). Each publisher has its own
# block of ``PARTITIONS`` partitions; events of unknown sources (tools, tests) share the
# block after the last.
PUBLISHERS: dict[str, tuple[str, ...]] = {
    "api": ("api",),
    "scheduler": ("scheduler",),
    "launcher": ("launcher", "agent", "kubernetes-runner"),
    "monitor": ("monitor",),
    "alerter": ("alerter",),
}
# Events a publisher's own may overtake, which its relay passes publish first when they
# are still unsent (one of another service's, deduplicated by JetStream if that service
# publishes it too): the scheduler places a job read from Postgres, whose ``job.submitted``
# (the API's) or requeue (the launcher's ``job.retrying``, ``job.preempted``) may still be
# on its way (``append``'s ``follows_others``). Its bus identity may publish these too.
MAY_PRECEDE: dict[str, tuple[str, ...]] = {
    "scheduler": ("corral.job.submitted", "corral.job.retrying", "corral.job.preempted"),
}
_BLOCK_OF = {source: block for block, sources in enumerate(PUBLISHERS.values()) for source in sources}
ALL_PARTITIONS = tuple(range((len(PUBLISHERS) + 1) * PARTITIONS))


def _name(source: str) -> str:
    return source.rsplit("/", 1)[-1]


def partition_of(aggregate: str, source: str) -> int:
    """The partition of an event about ``aggregate`` from ``source``: within its
    publisher's block, by aggregate, so one publisher's events of one job keep their order."""
    block = _BLOCK_OF.get(_name(source), len(PUBLISHERS))
    return block * PARTITIONS + zlib.crc32(aggregate.encode()) % PARTITIONS


def sources_published_with(source: str) -> tuple[str, ...]:
    """Every source whose rows the relay of ``source``'s process publishes (itself, and
    those its publisher relays for: the launcher's relay takes the agents' rows)."""
    name = _name(source)
    prefix = source[: -len(name)]
    for sources in PUBLISHERS.values():
        if name == sources[0]:
            return tuple(prefix + s for s in sources)
    return (source,)


def partitions_of(sources: tuple[str, ...]) -> tuple[int, ...]:
    """The partitions holding the rows of ``sources``."""
    blocks = sorted({_BLOCK_OF.get(_name(s), len(PUBLISHERS)) for s in sources})
    return tuple(b * PARTITIONS + n for b in blocks for n in range(PARTITIONS))


def may_precede(source: str) -> tuple[str, ...]:
    """The subject prefixes of the events that ``source``'s relay publishes first (see
    ``MAY_PRECEDE``)."""
    return MAY_PRECEDE.get(_name(source), ())


def notify_channel(source: str) -> str:
    """The NOTIFY channel of one event source (``corral/api`` → ``corral_outbox_api``).

    Each service's relay wakes only for the writes of the sources it publishes.
    """
    return "corral_outbox_" + _name(source)


OutboxRow = tuple[str, str, str, int, bytes, dict[str, str]]


def outbox_row(event: Envelope, aggregate: str) -> OutboxRow:
    """The values of ``event``'s outbox row, in the order of the table's columns
    (event_id, subject, aggregate, part, payload, headers), stamped with the current
    trace unless it carries one.

    For ``append`` and ``append_many``, and for a statement that writes a state change
    and its event at once (the API's submit: ``services/api/jobs/sql/jobs.sql``), which must
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
        partition_of(aggregate, event.source),
        event.model_dump_json().encode(),
        headers,
    )


INSERT = """INSERT INTO corral.outbox (event_id, subject, aggregate, part, payload, headers)
             VALUES ($1, $2, $3, $4, $5, $6)"""
