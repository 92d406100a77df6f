"""What wakes the scheduler, on real NATS: the events of ``WAKING_SUBJECTS``, as
JetStream stores them, seen by a plain subscription (``NatsBus.watch``) with nothing
left on the server to fetch or ack; other events do not wake it."""

from __future__ import annotations

import asyncio

from services.scheduler.wakeups import WAKING_SUBJECTS
from shared.bus.nats import NatsBus
from shared.bus.streams import JOBS


async def _settle() -> None:
    await asyncio.sleep(0.2)


async def test_job_and_node_events_wake_the_cycle_and_nothing_is_left_to_ack(bus: NatsBus) -> None:
    woken: list[float] = []
    watching = asyncio.create_task(bus.watch(WAKING_SUBJECTS, lambda: woken.append(1.0)))
    try:
        await _settle()  # subscribed
        consumers_before = await _consumers(bus)
        for n, subject in enumerate(
            ("corral.job.submitted.j1", "corral.job.succeeded.j1", "corral.node.drained.n1")
        ):
            await bus.publish(subject, b"{}", msg_id=f"wake-{n}")
        await bus.publish("corral.task.started.a1", b"{}", msg_id="no-wake")  # not a waking event
        await _settle()
        assert len(woken) == 3
        assert await _consumers(bus) == consumers_before  # no consumer made
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)


async def _consumers(bus: NatsBus) -> list[str]:
    return sorted(info.name for info in await bus.js.consumers_info(JOBS.name))
