"""What the outbox tests share: an event, the stream's messages, a change that appends
then fails, and a relay running and publishing on commit."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.events import JobSubmitted
from shared.events.jobs import JobSubmittedData
from shared.outbox import OutboxRelay, append, publishing_on_commit


def make_event(job: str, name: str = "step", source: str = "test") -> JobSubmitted:
    return JobSubmitted(
        source=source,
        subject=job,
        data=JobSubmittedData(job_id=job, name=name, user="ada", virtual_cluster="default", total_gpus=1),
    )


async def stream_messages(
    bus: NatsBus, subject: str = "corral.job.>"
) -> list[tuple[str, bytes, dict[str, str]]]:
    """Everything on the JOBS stream, read with an ephemeral ordered consumer."""
    sub = await bus.js.subscribe(subject, ordered_consumer=True)
    messages: list[tuple[str, bytes, dict[str, str]]] = []
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=0.5)
            except TimeoutError:
                return messages
            messages.append((msg.subject, msg.data, dict(msg.headers or {})))
    finally:
        await sub.unsubscribe()


class Abort(Exception):
    pass


async def append_then_fail(db: Database, job: str) -> None:
    """A state change that appends its event, then fails: its transaction rolls back."""
    async with db.transaction() as conn:
        await append(conn, make_event(job), aggregate=job)
        raise Abort


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def running_on_commit(relay: OutboxRelay) -> AsyncIterator[None]:
    """``relay`` running and publishing on commit for this test's transactions, once its
    first (full) pass is over and it listens."""
    with publishing_on_commit(relay):
        task = asyncio.create_task(relay.run())
        try:
            await until(lambda: relay.publishing_on_commit)
            await asyncio.sleep(0.3)
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
