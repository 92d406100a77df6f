"""A relay pass publishes each job's rows in order and the jobs side by side
(``sending.publish_each_in_order``), against real NATS and Postgres: a publish JetStream
refuses stops its own job's lane, never another's, and nothing of that job after it is
stored or stamped."""

from __future__ import annotations

import logging

import pytest

from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.outbox import OutboxRelay, append, partition_of
from shared.outbox.sending import Outgoing, publish_each_in_order
from tests.shared.outbox_helpers import make_event, stream_messages


def _row(key: int, job: str, name: str, subject: str | None = None) -> Outgoing:
    event = make_event(job, name)
    return Outgoing(
        key=key,
        event_id=event.id,
        subject=subject or event.nats_subject,
        payload=event.model_dump_json().encode(),
        headers={},
        age_s=0.0,
    )


async def test_a_refused_publish_stops_its_jobs_lane_and_no_other(
    bus: NatsBus, caplog: pytest.LogCaptureFixture
) -> None:
    # No stream takes corral.nowhere.*: JetStream answers that publish with an error,
    # as it would a row it could not store.
    refused = _row(1, "job-a", "first", subject="corral.nowhere.job-a")
    lanes = [
        [refused, _row(3, "job-a", "second")],
        [_row(2, "job-b", "first"), _row(4, "job-b", "second")],
    ]
    with caplog.at_level(logging.WARNING, logger="shared.outbox.sending"):
        sent = await publish_each_in_order(bus, lanes)
    assert sorted(sent) == [2, 4]
    stored = [subject for subject, _, _ in await stream_messages(bus)]
    assert stored == ["corral.job.submitted.job-b", "corral.job.submitted.job-b"]  # job-a's second waits
    [warning] = [r.getMessage() for r in caplog.records]
    assert "NATS did not take corral.nowhere.job-a" in warning
    assert "2 of 4 rows published, the rest stay unsent and are retried" in warning


async def test_each_jobs_rows_reach_the_stream_in_their_order(bus: NatsBus) -> None:
    lanes = [[_row(n * 10 + i, f"job-{n}", f"step-{i}") for i in range(5)] for n in range(8)]
    sent = await publish_each_in_order(bus, lanes)
    assert sorted(sent) == sorted(row.key for lane in lanes for row in lane)
    by_job: dict[str, list[str]] = {}
    for subject, data, _ in await stream_messages(bus):
        event = make_event("x").model_validate_json(data)
        by_job.setdefault(subject, []).append(event.data.name)
    assert by_job == {f"corral.job.submitted.job-{n}": [f"step-{i}" for i in range(5)] for n in range(8)}


async def test_a_relay_pass_stamps_the_other_jobs_rows_and_leaves_the_refused_jobs_unsent(
    db: Database, bus: NatsBus
) -> None:
    """Two jobs' rows in one partition; JetStream refuses job-a's first: the pass stamps
    job-b's two, and job-a's second waits unsent behind its first (not published out of order)."""
    job_a = "job-a"
    part = partition_of(job_a, "test")
    job_b = next(
        f"job-{n}" for n in range(1000) if f"job-{n}" != job_a and partition_of(f"job-{n}", "test") == part
    )
    async with db.transaction() as conn:
        for step in ("first", "second"):
            await append(conn, make_event(job_a, step), aggregate=job_a)
            await append(conn, make_event(job_b, step), aggregate=job_b)
    first_of_a = await db.fetchval("SELECT min(id) FROM corral.outbox WHERE aggregate = $1", job_a)
    await db.execute("UPDATE corral.outbox SET subject = 'corral.nowhere.job-a' WHERE id = $1", first_of_a)
    assert await OutboxRelay(db, bus)._relay_partition(part) == 2
    unsent = await db.fetch("SELECT aggregate FROM corral.outbox WHERE sent_at IS NULL ORDER BY id")
    assert [row["aggregate"] for row in unsent] == [job_a, job_a]
    stored = [subject for subject, _, _ in await stream_messages(bus)]
    assert stored == [f"corral.job.submitted.{job_b}"] * 2
