"""The node agent on real Postgres with real processes: a stop the platform asked for is
classified by the platform's condition, whichever way the agent hears of it first."""

from __future__ import annotations

import asyncio
from pathlib import Path

from services.launcher.agent.agent import NodeAgent
from services.launcher.repository import SQL
from shared.db.pool import Database
from tests.launcher import attempts

NODE = "gpu-7"


async def _ended(db: Database, attempt_id: str) -> dict[str, object]:
    for _ in range(200):
        row = await db.fetchrow(
            "SELECT state, exit_code, signal, classification, reason FROM launcher.attempts WHERE id = $1",
            attempt_id,
        )
        assert row is not None
        if row["state"] == "EXITED":
            return dict(row)
        await asyncio.sleep(0.05)
    raise AssertionError(f"attempt {attempt_id} did not end within 10 s")


async def test_a_preemption_seen_by_the_reconcile_loop_first_is_still_transient(
    db: Database, tmp_path: Path
) -> None:
    """The race: the agent's reconcile loop finds the stop request in Postgres before the
    request's event arrives. The task must still stop with the request's platform
    condition, its end classified `transient`, not `unknown` (which counts as a retry)."""
    await attempts.known_nodes(db, NODE)
    (attempt_id,) = await attempts.assigned(db, NODE, instances=1, command="sleep 30")
    async with asyncio.TaskGroup() as tg:
        agent = NodeAgent(
            db,
            tg,
            node_id=NODE,
            log_dir=tmp_path / "logs",
            state_dir=tmp_path / "state",
            work_dir=tmp_path / "work",
            stop_grace_s=0.5,
        )
        await agent.register(lease_s=30)
        await agent.start_attempt(attempt_id)
        assert await db.fetchval(SQL.request_stop, attempt_id, "preempted for job-x", "preempted") == NODE
        await agent.reconcile()  # no event: only what Postgres says
        ended = await _ended(db, attempt_id)
    assert ended["classification"] == "transient"
    assert ended["reason"] == "stopped: preempted for job-x"
    assert (ended["exit_code"], ended["signal"]) in ((143, None), (None, 15))
