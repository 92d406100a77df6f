"""A placement becomes attempts (``attempts.create_attempts``), on real Postgres: one
ASSIGNED attempt per placed instance with its ``task.assigned``, ports no live attempt on
the node holds, and nothing twice for a redelivered ``job.scheduled``."""

from __future__ import annotations

import asyncio
import json

import pytest

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.launcher import attempts as placing
from services.launcher.attempts import PORT_RANGE, create_attempts
from shared.db.pool import Database
from shared.jobs import JobSpec
from tests.launcher import attempts

NODE = "node-a"


async def _scheduled_gang(db: Database) -> str:
    """Two tasks of a role with one labelled port, placed on ``NODE`` as generation 1."""
    spec = JobSpec.model_validate(
        {
            "name": "serve",
            "tasks": [
                {"name": "w", "instances": 2, "command": "x", "resources": {"gpus": 1}, "ports": {"http": 1}}
            ],
        }
    )
    job_id: str = (await Submitter(JobRepository(db)).submit(spec, "alice", None)).job.id
    await db.execute("UPDATE api.jobs SET state = 'SCHEDULED', generation = 1 WHERE id = $1", job_id)
    for index in range(2):
        await db.execute(
            "INSERT INTO scheduler.allocations"
            " (job_id, generation, task_role, task_index, node_id, gpu_indices)"
            " VALUES ($1, 1, 'w', $2, $3, $4)",
            job_id,
            index,
            NODE,
            [index],
        )
    return job_id


async def test_a_placement_becomes_attempts_on_ports_no_live_attempt_holds(db: Database) -> None:
    await attempts.known_nodes(db, NODE)
    # Live attempts on the node hold every port of the range but the last three; an
    # ended one held those three, and no longer does.
    [holder] = await attempts.assigned(db, NODE, instances=1, state="RUNNING")
    await db.execute(
        "UPDATE launcher.attempts SET ports = $2 WHERE id = $1",
        holder,
        {"master": [PORT_RANGE[0]], "other": list(PORT_RANGE[1:-3])},
    )
    [ended] = await attempts.assigned(db, NODE, instances=1, state="EXITED")
    await db.execute(
        "UPDATE launcher.attempts SET ports = $2 WHERE id = $1", ended, {"master": list(PORT_RANGE[-3:])}
    )
    job_id = await _scheduled_gang(db)

    async with db.transaction() as conn:
        assert await create_attempts(conn, job_id, 1) == 2
    rows = await db.fetch(
        "SELECT id, task_index, state, ports FROM launcher.attempts WHERE job_id = $1 ORDER BY task_index",
        job_id,
    )
    assert [r["state"] for r in rows] == ["ASSIGNED", "ASSIGNED"]
    given = [p for r in rows for ports in r["ports"].values() for p in ports]
    # The first task's "master" (the rendezvous) and "http", the second's "http": the three free.
    assert sorted(given) == list(PORT_RANGE[-3:])
    assert set(rows[0]["ports"]) == {"master", "http"}
    assert set(rows[1]["ports"]) == {"http"}
    announced = [
        json.loads(r["payload"])["data"]
        for r in await db.fetch(
            "SELECT payload FROM corral.outbox WHERE subject LIKE 'corral.task.assigned.%' ORDER BY id"
        )
    ]
    assert [a["attempt_id"] for a in announced] == [r["id"] for r in rows]
    assert [a["gpu_indices"] for a in announced] == [[0], [1]]

    # A redelivered job.scheduled (or the reconcile loop) creates nothing more.
    async with db.transaction() as conn:
        assert await create_attempts(conn, job_id, 1) == 0
    assert await db.fetchval("SELECT count(*) FROM launcher.attempts WHERE job_id = $1", job_id) == 2
    assert (
        await db.fetchval("SELECT count(*) FROM corral.outbox WHERE subject LIKE 'corral.task.assigned.%'")
        == 2
    )


async def test_placements_on_one_node_handled_at_once_never_share_a_port(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight placements of two tasks each (three ports) on one node, all at once, each in
    its own transaction, as the launcher handles them side by side: from a range of 24
    ports, exactly enough, every port goes to one task. Without the node's lock, each
    would read the same free ports and most would be given twice."""
    monkeypatch.setattr(placing, "PORT_RANGE", range(21000, 21024))
    await attempts.known_nodes(db, NODE)
    jobs = [await _scheduled_gang(db) for _ in range(8)]

    async def place(job_id: str) -> int:
        async with db.transaction() as conn:
            return await create_attempts(conn, job_id, 1)

    assert await asyncio.gather(*(place(job_id) for job_id in jobs)) == [2] * 8
    given = [
        port
        for r in await db.fetch("SELECT ports FROM launcher.attempts WHERE node_id = $1", NODE)
        for ports in r["ports"].values()
        for port in ports
    ]
    assert sorted(given) == list(range(21000, 21024))
