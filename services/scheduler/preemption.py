"""Preemption decisions: the scheduler asks for a placed job's GPUs back.

The policy decides *whom* to preempt (``victims.py``: lowest priority, borrowed
first, least progress lost, after a minimum runtime); this module records the decision
and announces it, in one transaction. The launcher carries it out: it stops the job's
tasks with their grace period, then puts the job back in the queue without counting a
retry (``corral.job.preempted.v1``), keeping its attempt history.
"""

from __future__ import annotations

from services.scheduler import repository
from services.scheduler.decisions import SOURCE
from shared.db.pool import Connection
from shared.events import JobPreemptRequested
from shared.events.jobs import JobPreemptionData
from shared.outbox import append


async def request_preemption(conn: Connection, job_id: str, reason: str) -> bool:
    """Record and announce the decision; False if the job is not placed or already asked."""
    generation = await repository.insert_preemption(conn, job_id, reason)
    if generation is None:
        return False
    event = JobPreemptRequested(
        source=SOURCE,
        subject=job_id,
        data=JobPreemptionData(job_id=job_id, generation=generation, reason=reason),
    )
    await append(conn, event, aggregate=job_id)
    return True


async def evict_from_drained_nodes(conn: Connection) -> list[str]:
    """Preempt the jobs on nodes drained with eviction (a reconcile step of every cycle,
    so a lost ``node.drained`` event delays the eviction by one cycle at most)."""
    evicted = []
    for eviction in await repository.jobs_on_evicting_nodes(conn):
        reason = f"node {eviction.node_id} drained: {eviction.drain_reason}"
        if await request_preemption(conn, eviction.job_id, reason):
            evicted.append(eviction.job_id)
    return evicted
