"""The launcher's repair loop (DESIGN.md §2): what lost events (or a lost NOTIFY) left
behind, found in Postgres and fixed, on start and every
``CORRAL_LAUNCHER_RECONCILE_INTERVAL_S``: nodes whose lease expired
(``lost_nodes.py``), placed jobs with no attempts yet (``attempts.py``), jobs whose
attempts call for a decision (``outcomes.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial

from services.launcher import repository
from services.launcher.attempts import create_attempts
from services.launcher.lost_nodes import declare_lost_nodes
from services.launcher.outcomes import evaluate_job
from shared.aio import raise_if_cancelling
from shared.db.pool import DATABASE_ERRORS, Connection, Database
from shared.outbox import following_others

log = logging.getLogger(__name__)


async def reconcile(db: Database, lease_s: float = 15.0) -> dict[str, int]:
    """Repair what lost events left behind; returns counts of each repair.

    Each job is repaired in its own transaction, and a job whose repair fails is logged
    and skipped: one bad job must not stop the launcher from repairing all the others.
    """
    repaired = {"attempts_lost": await declare_lost_nodes(db, lease_s)}
    repaired |= {"attempts_created": 0, "jobs_decided": 0, "failed": 0}
    repairs: list[tuple[str, str, Callable[[Connection], Awaitable[int]]]] = []
    for job_id, generation in await repository.scheduled_jobs_without_attempts(db):
        repairs.append(("attempts_created", job_id, partial(_create, job_id=job_id, generation=generation)))
    for job_id in await repository.active_jobs_to_evaluate(db):
        repairs.append(("jobs_decided", job_id, partial(_decide, job_id=job_id)))
    for kind, job_id, repair in repairs:
        try:
            async with db.transaction() as conn:
                repaired[kind] += await repair(conn)
        except DATABASE_ERRORS:
            raise  # the database itself is in trouble (or we are cancelled): the caller decides
        except Exception:
            raise_if_cancelling()
            log.exception("could not repair job %s (%s); skipping it this round", job_id, kind)
            repaired["failed"] += 1
    return repaired


async def _create(conn: Connection, *, job_id: str, generation: int) -> int:
    return await create_attempts(conn, job_id, generation)


async def _decide(conn: Connection, *, job_id: str) -> int:
    # A decision may follow a node's unpublished task.exited (shared/outbox).
    with following_others():
        return int(await evaluate_job(conn, job_id) is not None)
