"""Nodes whose agent stopped renewing its lease: fenced, and their live attempts LOST.

LOST is ``transient`` in the exit-code table: the job is retried (not counted) and the
scheduler, which places only on nodes with a live agent lease, puts it elsewhere. A
fenced agent that comes back takes a new epoch and may no longer start or report for
what it held (DESIGN.md §2).
"""

from __future__ import annotations

import logging

from services.launcher import repository
from services.launcher.outcomes import SOURCE, evaluate_job
from shared.db.pool import Database
from shared.events import TaskExited
from shared.events.jobs import TaskExitedData
from shared.outbox import append

log = logging.getLogger(__name__)


async def declare_lost_nodes(db: Database, lease_s: float = 15.0) -> int:
    """Fence agents whose lease expired and end their nodes' live attempts as LOST, each
    job then decided in the same transaction. Returns how many attempts were declared lost.
    """
    async with db.transaction() as conn:
        for agent in await repository.declare_lost_agents(conn, lease_s):
            log.warning(
                "node %s lost: its agent's lease expired at %s", agent.node_id, agent.lease_expires_at
            )
    lost = 0
    for attempt in await repository.live_attempts_on_lost_nodes(db):
        reason = (
            f"node {attempt.node_id} lost: its agent's lease expired at {attempt.lease_expires_at:%H:%M:%S}"
        )
        async with db.transaction() as conn:
            # Job row first, as every handler does: the same lock order (no deadlock), and
            # the TaskExited event is ordered after whatever the job's handlers committed.
            await repository.lock_job(conn, attempt.job_id)
            ended = await repository.mark_attempt_lost(conn, attempt.id, reason)
            if ended is None:
                continue
            event = TaskExited(
                source=SOURCE,
                subject=attempt.id,
                data=TaskExitedData(
                    attempt_id=attempt.id,
                    job_id=ended.job_id,
                    node_id=ended.node_id,
                    exit_code=None,
                    reason=reason,
                    classification="transient",
                ),
            )
            await append(conn, event, aggregate=ended.job_id)
            await evaluate_job(conn, ended.job_id)
            lost += 1
    return lost
