"""Composition root of the node agent: its assignments consumer and reconcile loop.

The agent's durable consumer filters ``corral.task.assigned.<node>``, so each agent
sees only its own node's assignments; the reconcile loop re-drives any it missed and
re-adopts or settles tasks that were running when the agent last stopped.

Before anything else the agent checks that it can isolate tasks (``sandbox``). One
that cannot refuses to start, saying what is missing, unless its operator allowed
unisolated tasks; its node then shows ``isolation: none``.
"""

from __future__ import annotations

import asyncio
import logging
import pwd
import sys
from pathlib import Path

from services.launcher.agent.agent import SOURCE, NodeAgent
from services.launcher.agent.sandbox.sandbox import (
    Sandbox,
    SandboxConfig,
    SandboxProblem,
    needed_mounts,
    open_sandbox,
)
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


async def serve(settings: Settings, state_dir: Path, sandbox: Sandbox | None, isolation_detail: str) -> None:
    try:
        await _serve(settings, state_dir, sandbox, isolation_detail)
    finally:
        if sandbox is not None:
            sandbox.close()
        tidy_state_dir(state_dir)


def _paths(colon_separated: str) -> tuple[Path, ...]:
    return tuple(Path(p).resolve() for p in colon_separated.split(":") if p)


def sandbox_config(settings: Settings, state_dir: Path) -> SandboxConfig:
    home = settings.common.paths.home.resolve()
    # Corral's own state, and root's home (credentials of every kind end up there).
    private = [
        home,
        settings.log_dir,
        settings.work_dir,
        state_dir,
        Path("/var/lib/corral"),
        Path("/run/corral"),
    ]
    hidden, readable = needed_mounts(
        [*private, Path(pwd.getpwuid(0).pw_dir).resolve()], list(_paths(settings.agent.readable_paths))
    )
    return SandboxConfig(
        node_id=settings.sandbox_scope,
        hidden=hidden,
        claims_dir=settings.agent.uid_claims_dir,
        uid_range=settings.agent.uid_bounds,
        run_as=settings.agent.run_as,
        pids_max=settings.agent.pids_max,
        writable=_paths(settings.agent.writable_paths),
        readable=readable,
        device_root=settings.agent.device_root,
        helper=settings.agent.sandbox_helper,
        cgroup_root=settings.agent.cgroup_root,
    )


def choose_isolation(settings: Settings, state_dir: Path) -> tuple[Sandbox | None, str]:
    """The node's sandbox and how the node describes it, or None and why not (when the
    operator allowed unisolated tasks; otherwise ``SandboxProblem`` stops the agent)."""
    try:
        sandbox = open_sandbox(sandbox_config(settings, state_dir))
    except SandboxProblem as exc:
        if not settings.agent.allow_unisolated:
            raise
        log.warning("tasks on this node run UNISOLATED, as this agent's user: %s", exc)
        return None, f"tasks run as the agent's own user: {exc}"
    return sandbox, sandbox.description


async def _serve(settings: Settings, state_dir: Path, sandbox: Sandbox | None, isolation_detail: str) -> None:
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
            sandbox=sandbox,
        )
        await agent.register(settings.agent.lease_s, isolation_detail)
        res.start_common_tasks(tg)
        tg.create_task(agent.hold_lease(settings.agent.lease_s), name="lease")
        spec = ConsumerSpec(assignments_consumer(node_id), agent.handle)
        tg.create_task(run_consumer(res.bus, spec, res.dead_letters), name="assignments")
        tg.create_task(
            every(settings.agent.reconcile_interval_s, agent.reconcile, "agent reconcile"), name="reconcile"
        )


def main() -> int:
    settings = Settings()
    state_dir = settings.state_dir  # (made when read: read once)
    try:
        sandbox, isolation_detail = choose_isolation(settings, state_dir)
    except SandboxProblem as exc:
        tidy_state_dir(state_dir)
        print(
            f"corral agent: refusing tasks: they cannot be isolated on this node: {exc}. "
            "(CORRAL_AGENT_ALLOW_UNISOLATED=true runs them unisolated, as this agent's user.)",
            file=sys.stderr,
            flush=True,
        )
        return 2
    return run_service("agent", lambda: serve(settings, state_dir, sandbox, isolation_detail))
