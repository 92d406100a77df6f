"""Event handlers: every event the scheduler listens to just wakes the cycle.

The cycle reads the truth from Postgres, so handlers need no state and no
idempotency records: a redelivered or reordered event only causes one more cycle.
"""

from __future__ import annotations

from services.scheduler.cycle import Cycle
from shared.bus import ConsumerConfig
from shared.bus.consumer import Handler
from shared.bus.streams import JOBS, NODES
from shared.events import Event

JOB_EVENTS = ConsumerConfig(
    stream=JOBS.name,
    durable="scheduler-jobs",
    filter_subjects=(
        "corral.job.submitted.>",
        "corral.job.succeeded.>",
        "corral.job.failed.>",
        "corral.job.cancelled.>",
        "corral.job.preempted.>",  # back in the queue, its GPUs free for whoever asked
    ),
    deliver_all=False,
)
NODE_EVENTS = ConsumerConfig(
    stream=NODES.name,
    durable="scheduler-nodes",
    filter_subjects=("corral.node.>",),
    deliver_all=False,
)


def wake_cycle(cycle: Cycle) -> Handler:
    async def handle(_: Event) -> None:
        cycle.wake()

    return handle
