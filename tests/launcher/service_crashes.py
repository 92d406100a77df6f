"""A service replica's job crashing, as the launcher sees it: the job RUNNING in a new
generation with one ended attempt that ran ``ran_s``, then the launcher's decision
(``outcomes.evaluate_job``) in a transaction of its own, as its reconcile loop makes it."""

from __future__ import annotations

from typing import Any

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.launcher.outcomes import evaluate_job
from shared.db.pool import Database
from shared.ids import new_attempt_id
from shared.jobs import JobSpec
from tests.launcher import attempts

NODE = "node-a"


async def service_job(db: Database, **retry: Any) -> str:
    spec = JobSpec.model_validate(
        {
            "name": "echo",
            "kind": "service",
            "tasks": [{"name": "main", "command": "python serve.py", "ports": {"http": 1}}],
            "service": {"replicas": 1, "port": "http"},
            "retry": retry,
        }
    )
    await attempts.known_nodes(db, NODE)
    return (await Submitter(JobRepository(db)).submit(spec, "alice", None)).job.id


async def crash(
    db: Database, job_id: str, *, exit_code: int = 1, ran_s: float = 0.5, classification: str = "permanent"
) -> str | None:
    """The job's next run ended with ``exit_code`` after ``ran_s``; the state it is decided to."""
    await db.execute(
        "UPDATE api.jobs SET state = 'RUNNING', generation = generation + 1, not_before = NULL WHERE id = $1",
        job_id,
    )
    await db.execute(
        "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no,"
        " node_id, gpu_indices, state, exit_code, reason, classification, started_at, finished_at)"
        " SELECT $1, $2, generation, 'main', 0, 1, $3, '{}', 'EXITED', $4, $5, $7,"
        " now() - make_interval(secs => $6), now() FROM api.jobs WHERE id = $2",
        new_attempt_id(),
        job_id,
        NODE,
        exit_code,
        f"exited with code {exit_code}",
        ran_s,
        classification,
    )
    async with db.transaction() as conn:
        decided = await evaluate_job(conn, job_id)
    return None if decided is None else decided.value
