"""``GET /api/v1/jobs/{id}/events``: one job's lifecycle, read back from JetStream.

The ``CORRAL_JOBS`` stream keeps every job and task event for a week: it is the record,
and the documents in it are exactly what SSE, webhooks and NATS consumers got. A job's
own events are on ``corral.job.<verb>.<job id>``; task events are routed by node
(``corral.task.<verb>.<node id>``, what node agents listen on), so the read also takes
the task subjects of the nodes the job's attempts ran on, and keeps those whose
``data.job_id`` is this job. One short-lived ephemeral consumer (the kind the event
hub's ``replay`` uses), starting a little before the job was submitted, reading up to
the stream's end as it was when the read began: a bounded read, however busy the stream
is.

Not included: alerts about the job (``GET /api/v1/alerts`` has them), and events older
than the stream keeps.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import nats.errors
from nats.js import JetStreamContext, api

from shared.bus.streams import JOBS

MAX_JOB_EVENTS = 10_000
# The node subjects one read may take; a job spread over more nodes gets the job's own
# events and those of its tasks on the first this many nodes (``truncated`` says so).
MAX_NODES = 256
_BATCH = 256
# Postgres stamped the job, NATS stamps messages: a margin for the two clocks.
_CLOCK_MARGIN = timedelta(seconds=60)


async def job_history(
    js: JetStreamContext, job_id: str, since: datetime, nodes: list[str], limit: int
) -> list[dict[str, Any]]:
    """The job's events (as documents), oldest first, at most ``limit``."""
    last = (await js.stream_info(JOBS.name)).state.last_seq
    if not last:
        return []
    subjects = [f"corral.job.*.{job_id}"] + [f"corral.task.*.{node}" for node in nodes[:MAX_NODES]]
    config = api.ConsumerConfig(
        filter_subjects=subjects,
        deliver_policy=api.DeliverPolicy.BY_START_TIME,
        opt_start_time=since - _CLOCK_MARGIN,
        ack_policy=api.AckPolicy.NONE,
        inactive_threshold=60.0,  # the server removes it if we vanish without deleting it
        mem_storage=True,
    )
    events: list[dict[str, Any]] = []
    sub = await js.pull_subscribe(subjects[0], stream=JOBS.name, config=config)
    try:
        while len(events) < limit:
            try:
                msgs = await sub.fetch(_BATCH, timeout=2.0)
            except nats.errors.TimeoutError:
                break  # nothing (more) matches
            for msg in msgs:
                document = _document(msg.data)
                if document is not None and (document.get("data") or {}).get("job_id") == job_id:
                    events.append(document)
                if msg.metadata.sequence.stream >= last or msg.metadata.num_pending == 0:
                    return events[:limit]
    finally:
        await sub.unsubscribe()
    return events[:limit]


def _document(payload: bytes) -> dict[str, Any] | None:
    try:
        document = json.loads(payload)
    except ValueError:
        return None
    return document if isinstance(document, dict) and isinstance(document.get("data"), dict) else None
