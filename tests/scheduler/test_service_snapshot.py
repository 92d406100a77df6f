"""The cycle's reads tell a service replica from a batch job (``kind: service`` in its
spec), waiting and placed, on a real Postgres: what the policy's protection rests on."""

from __future__ import annotations

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.scheduler.snapshot import PendingJobs, load_snapshot
from shared.db.pool import Database
from shared.jobs import JobSpec

REPLICA = {
    "name": "svc",
    "kind": "service",
    "tasks": [{"name": "main", "command": "x", "ports": {"http": 1}, "resources": {"gpus": 1}}],
    "service": {"replicas": 1, "port": "http"},
}
BATCH = {"name": "train", "tasks": [{"name": "main", "command": "x", "resources": {"gpus": 1}}]}


async def test_replicas_are_told_apart_waiting_and_placed(db: Database) -> None:
    submitter = Submitter(JobRepository(db))
    replica = (await submitter.submit(JobSpec.model_validate(REPLICA), "alice", None)).job.id
    batch = (await submitter.submit(JobSpec.model_validate(BATCH), "alice", None)).job.id
    async with db.transaction() as conn:
        waiting = {job.job_id: job.service for job in await PendingJobs().read(conn, 10)}
    assert waiting == {replica: True, batch: False}

    for job_id, gpu in ((replica, 0), (batch, 1)):
        await db.execute("UPDATE api.jobs SET state = 'SCHEDULED', generation = 1 WHERE id = $1", job_id)
        await db.execute(
            "INSERT INTO scheduler.allocations (job_id, generation, task_role, task_index, node_id,"
            " gpu_indices, borrowed) VALUES ($1, 1, 'main', 0, 'n1', $2, false)",
            job_id,
            [gpu],
        )
    async with db.transaction() as conn:
        snapshot = await load_snapshot(conn, 10, release=False)
    assert {job.job_id: job.service for job in snapshot.running} == {replica: True, batch: False}
