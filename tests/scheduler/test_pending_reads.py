"""The cycle's read of the pending jobs: demands once per job, progress every cycle."""

from __future__ import annotations

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.scheduler.model import TaskDemand
from services.scheduler.snapshot import PendingJobs
from shared.db.pool import Database
from shared.jobs import JobSpec


async def _submit(repo: Submitter, gpus: int, **extra: object) -> str:
    spec = JobSpec.model_validate(
        {"name": "t", "tasks": [{"name": "main", "command": "x", "resources": {"gpus": gpus}}], **extra}
    )
    return str((await repo.submit(spec, "alice", None)).job.id)


async def test_a_jobs_demands_are_read_once_and_its_progress_every_time(db: Database) -> None:
    repo = Submitter(JobRepository(db))
    first = await _submit(repo, 2, max_runtime_s=600, priority=5)
    known = PendingJobs()
    async with db.transaction() as conn:
        [job] = await known.read(conn, 10)
    assert (job.job_id, job.tasks, job.priority, job.max_runtime_s) == (
        first,
        (TaskDemand("main", 1, 2, 1.0, 1024),),
        5,
        600.0,
    )
    version = job.version

    # It ran 100 s on its 2 GPUs, came back for a retry (a new version), and a second
    # job arrived. The spec is never read again for the first: to show it, it is
    # changed behind the cache's back (the API never changes a spec).
    second = await _submit(repo, 1)
    await db.execute(
        """INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no,
                                          node_id, gpu_indices, state, started_at, finished_at)
           VALUES ('a1', $1, 1, 'main', 0, 1, 'n1', '{0,1}', 'EXITED', now() - interval '100 s', now())""",
        first,
    )
    await db.execute(
        """UPDATE api.jobs SET version = version + 1, generation = 1,
                  created_at = created_at - interval '1 hour',
                  spec = jsonb_set(spec, '{tasks,0,resources,gpus}', '8') WHERE id = $1""",
        first,
    )
    async with db.transaction() as conn:
        again, other = await known.read(conn, 10)
    assert again.job_id == first
    assert other.job_id == second
    assert again.version == version + 1
    assert again.tasks == (TaskDemand("main", 1, 2, 1.0, 1024),)  # read once, kept
    assert 199 < again.attained_gpu_s < 201
    assert 3490 < again.waited_s < 3510  # an hour old, less the 100 s it ran
    assert other.tasks == (TaskDemand("main", 1, 1, 1.0, 1024),)
    assert other.attained_gpu_s == 0.0

    # A job no longer pending leaves the read, and what was kept of it.
    await db.execute("UPDATE api.jobs SET state = 'CANCELLED' WHERE id = $1", first)
    async with db.transaction() as conn:
        assert [job.job_id for job in await known.read(conn, 10)] == [second]
    await db.execute("UPDATE api.jobs SET state = 'PENDING' WHERE id = $1", first)
    async with db.transaction() as conn:
        back, _ = await known.read(conn, 10)
    assert back.tasks == (TaskDemand("main", 1, 8, 1.0, 1024),)  # forgotten, so read afresh
