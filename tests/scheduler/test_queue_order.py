"""Where a waiting job stands: the order of the last cycle, written once per cycle.

Real Postgres, the real cycle (``Cycle.run_once`` on a leader's connection), jobs
submitted through the API's repository, one node registered with SQL as the monitor
and a node agent would leave it.
"""

from __future__ import annotations

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.scheduler.cycle import Cycle
from shared.db.pool import Database
from shared.jobs import JobSpec


async def _submit(repo: Submitter, gpus: int) -> str:
    spec = JobSpec.model_validate(
        {"name": "train", "tasks": [{"name": "main", "command": "x", "resources": {"gpus": gpus}}]}
    )
    return str((await repo.submit(spec, "alice", None)).job.id)


async def _ready_node(db: Database, gpus: int) -> None:
    await db.execute(
        """INSERT INTO monitor.nodes (id, hostname, simulated, state, gpu_count, last_heartbeat)
           VALUES ('n1', 'n1', true, 'READY', $1, now())""",
        gpus,
    )
    for index in range(gpus):
        await db.execute(
            """INSERT INTO monitor.gpus (node_id, index, uuid, model, memory_total_mb)
               VALUES ('n1', $1, $2, 'NVIDIA H100 80GB HBM3', 81559)""",
            index,
            f"GPU-{index}",
        )
    await db.execute(
        "INSERT INTO launcher.agents (node_id, epoch, lease_expires_at)"
        " VALUES ('n1', 1, now() + interval '1 hour')"
    )


async def _standing(db: Database) -> dict[str, tuple[int, str, object]]:
    """Each waiting job's position as the API reads it, its reason, and when its row changed."""
    rows = await db.fetch(
        """SELECT p.job_id, q.position, p.reason, p.updated_at
           FROM scheduler.pending_status p
           JOIN scheduler.queue_positions q USING (job_id)"""
    )
    return {r["job_id"]: (r["position"], r["reason"], r["updated_at"]) for r in rows}


async def test_positions_move_up_without_rewriting_the_reasons_behind(db: Database, cycle: Cycle) -> None:
    await _ready_node(db, gpus=2)
    repo = Submitter(JobRepository(db))
    first = await _submit(repo, 2)  # takes the node
    waiting = [await _submit(repo, 2) for _ in range(4)]
    assert await cycle.run_once() == 1
    before = await _standing(db)
    assert [before[job][0] for job in waiting] == [1, 2, 3, 4]
    assert {reason for _, reason, _ in before.values()} == {"Priority"}  # the first took them

    # The first job ends: its GPUs go back, the next job starts, everyone behind moves up.
    await db.execute("UPDATE api.jobs SET state = 'SUCCEEDED', finished_at = now() WHERE id = $1", first)
    assert await cycle.run_once() == 1
    after = await _standing(db)
    assert waiting[0] not in after
    assert [after[job][0] for job in waiting[1:]] == [1, 2, 3]
    # Same reason, same words: their rows were left alone; only the order was written.
    assert all(after[job][2] == before[job][2] for job in waiting[1:])

    # The next cycle finds no GPU free at its start. The first in the queue now waits for
    # GPUs to come free; those behind it still wait for the jobs ahead (Priority, as in
    # Slurm): only the head's row changes, not theirs, and not the order.
    order_written = await db.fetchval("SELECT updated_at FROM scheduler.queue_order")
    assert await cycle.run_once() == 0
    settled = await _standing(db)
    assert [settled[job][1] for job in waiting[1:]] == ["InsufficientGPUs", "Priority", "Priority"]
    assert all(settled[job][2] == before[job][2] for job in waiting[2:])
    assert [settled[job][0] for job in waiting[1:]] == [1, 2, 3]
    assert await db.fetchval("SELECT updated_at FROM scheduler.queue_order") == order_written

    # Nothing changed at all: the cycle writes nothing.
    assert await cycle.run_once() == 0
    assert await _standing(db) == settled
    assert await db.fetchval("SELECT updated_at FROM scheduler.queue_order") == order_written


async def test_a_leader_forgets_the_reasons_of_jobs_gone_and_a_new_one_every_stale_reason(
    db: Database, cycle: Cycle
) -> None:
    """A cycle deletes the rows of the jobs that left the queue since the last cycle it
    committed, not the whole queue anti-joined; a new leader, which does not know what
    the last one wrote, deletes every row of a job that is not waiting."""
    await _ready_node(db, gpus=2)
    repo = Submitter(JobRepository(db))
    first = await _submit(repo, 2)
    waiting = [await _submit(repo, 2) for _ in range(3)]
    assert await cycle.run_once() == 1
    assert set(await _standing(db)) == set(waiting)
    await db.execute("UPDATE api.jobs SET state = 'CANCELLED', finished_at = now() WHERE id = $1", waiting[2])
    assert await cycle.run_once() == 0
    assert set(await _standing(db)) == set(waiting[:2])  # the cancelled job's row is gone

    # A row a former leader left behind for a job that no longer waits.
    await db.execute(
        "INSERT INTO scheduler.pending_status (job_id, reason, detail) VALUES ($1, 'Priority', '')", first
    )
    # A new leader (a cycle that has committed nothing yet) with the same lock.
    assert await Cycle(cycle._leadership, interval_s=60).run_once() == 0
    rows = {r["job_id"] for r in await db.fetch("SELECT job_id FROM scheduler.pending_status")}
    assert rows == set(waiting[:2])
