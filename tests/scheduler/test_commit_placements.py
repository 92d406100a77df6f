"""A cycle's placements are written in one statement (``commit_decisions``), on real
Postgres: each placed job becomes SCHEDULED with its allocations and its
``job.scheduled``, and a job that changed after the cycle read it gets none of them."""

from __future__ import annotations

import json

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.scheduler.decisions import commit_decisions
from services.scheduler.planner import plan
from services.scheduler.snapshot import load_snapshot
from shared.db.pool import Database
from shared.jobs import JobSpec
from tests.scheduler.test_queue_order import _ready_node


def _spec(gpus: int) -> JobSpec:
    return JobSpec.model_validate(
        {"name": "t", "tasks": [{"name": "w", "instances": 2, "command": "x", "resources": {"gpus": gpus}}]}
    )


async def test_placements_commit_together_and_a_job_changed_since_the_read_gets_nothing(db: Database) -> None:
    await _ready_node(db, gpus=8)
    api = Submitter(JobRepository(db))
    kept = (await api.submit(_spec(1), "alice", None)).job.id
    cancelled = (await api.submit(_spec(2), "bob", None)).job.id
    third = (await api.submit(_spec(1), "carol", None)).job.id
    async with db.transaction() as conn:
        snapshot = await load_snapshot(conn, 10)
        decisions = plan(snapshot.pending, snapshot.nodes).decisions
        assert [d.job.job_id for d in decisions] == [kept, cancelled, third]
        # Cancelled after the read, before the commit (the API does not wait for a cycle).
        await db.execute(
            "UPDATE api.jobs SET state = 'CANCELLED', version = version + 1 WHERE id = $1", cancelled
        )
        assert await commit_decisions(conn, decisions) == 2

    jobs = {r["id"]: (r["state"], r["generation"]) for r in await db.fetch("SELECT * FROM api.jobs")}
    assert jobs == {kept: ("SCHEDULED", 1), cancelled: ("CANCELLED", 0), third: ("SCHEDULED", 1)}
    allocations = await db.fetch(
        "SELECT job_id, generation, task_role, task_index, gpu_indices FROM scheduler.allocations"
        " ORDER BY job_id, task_index"
    )
    assert sorted({r["job_id"] for r in allocations}) == sorted([kept, third])
    assert all(r["generation"] == 1 for r in allocations)
    gpus = [g for r in allocations for g in r["gpu_indices"]]
    assert len(gpus) == 4  # one per instance of each placed job
    assert len(set(gpus)) == 4  # none given twice
    events = [
        json.loads(r["payload"])
        for r in await db.fetch(
            "SELECT payload FROM corral.outbox WHERE subject LIKE 'corral.job.scheduled.%' ORDER BY id"
        )
    ]
    assert [e["data"]["job_id"] for e in events] == [kept, third]  # in the order decided
    assert [e["data"]["generation"] for e in events] == [1, 1]
    assert [len(e["data"]["placements"]) for e in events] == [2, 2]
