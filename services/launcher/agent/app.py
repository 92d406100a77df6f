"""Composition root of the node agent: its assignments consumer and reconcile loop.

The agent's durable consumer filters ``corral.task.assigned.<node>``, so each agent
sees only its own node's assignments; the reconcile loop re-drives any it missed and
re-adopts or settles tasks that were running when the agent last stopped.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from services.launcher.agent.agent import SOURCE, NodeAgent
from services.launcher.agent.settings import Settings, tidy_state_dir
from shared.bus import ConsumerConfig, ConsumerSpec, run_consumer
from shared.bus.streams import JOBS
from shared.service import every, run_service, service_resources

log = logging.getLogger(__name__)


def assignments_consumer(node_id: str) -> ConsumerConfig:
    return ConsumerConfig(
        stream=JOBS.name,
        durable=f"agent-{node_id}",
        filter_subjects=(f"corral.task.assigned.{node_id}", f"corral.task.stop_requested.{node_id}"),
    )


async def serve(settings: Settings) -> None:
    state_dir = settings.state_dir  # (made when read: read once)
    try:
        await _serve(settings, state_dir)
    finally:
        tidy_state_dir(state_dir)


async def _serve(settings: Settings, state_dir: Path) -> None:
    node_id = settings.agent.node_id
    async with (
        service_resources(f"agent-{node_id}", settings.common, event_source=SOURCE) as res,
        asyncio.TaskGroup() as tg,
    ):
        agent = NodeAgent(
            res.db,
            tg,
            node_id=node_id,
            log_dir=settings.log_dir,
            state_dir=state_dir,
            work_dir=settings.work_dir,
            stop_grace_s=settings.agent.stop_grace_s,
        )
        await agent.register(settings.agent.lease_s)
        res.start_common_tasks(tg)
        tg.create_task(agent.hold_lease(settings.agent.lease_s), name="lease")
        spec = ConsumerSpec(assignments_consumer(node_id), agent.handle)
        tg.create_task(run_consumer(res.bus, spec, res.dead_letters), name="assignments")
        tg.create_task(
            every(settings.agent.reconcile_interval_s, agent.reconcile, "agent reconcile"), name="reconcile"
        )


def main() -> int:
    settings = Settings()
    return run_service("agent", lambda: serve(settings))
