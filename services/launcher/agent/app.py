"""Composition root of the node agent: its assignments consumers and reconcile loop.

The agent's durable consumers filter ``corral.task.assigned.<node>`` and
``corral.task.stop_requested.<node>``, so each agent sees only its own node's work;
the reconcile loop re-drives any it missed and re-adopts or settles tasks that were
running when the agent last stopped.

Before anything else the agent checks that it can isolate tasks (``sandbox``). One
that cannot refuses to start, saying what is missing, unless its operator allowed
unisolated tasks; its node then shows ``isolation: none``.

The agent reaches Postgres only through its node's functions, with the node's secret
(``CORRAL_AGENT_NODE_SECRET_FILE``; ``repository.py``): its liveness and dead letters
too, and it runs no outbox relay (the launcher's publishes its events).

The agent answers for its tasks' logs on ``corral.logs.<node>`` (``task_logs.py``: the
API asks; no inbound port) and deletes those past the node's retention
(``log_retention.py``). It serves exec and port-forward streams into its running tasks
on ``corral.interactive.<node>.*`` the same way (``interactive/``: the API opens them).

On a node whose GPUs are shared (``CORRAL_GPU_SHARING``), it checks that each task
holding a share of a GPU keeps to it (``gpu_share/watch.py``).
"""

from __future__ import annotations

import asyncio
import logging
import pwd
import sys
from pathlib import Path

from services.launcher.agent.agent import SOURCE, NodeAgent
from services.launcher.agent.artifacts import TaskArtifacts
from services.launcher.agent.gpu_share.processes import open_reader
from services.launcher.agent.gpu_share.shares import GpuShares
from services.launcher.agent.gpu_share.watch import GpuShareWatch
from services.launcher.agent.interactive.server import InteractiveServer
from services.launcher.agent.repository import NodeDeadLetters, NodeLiveness, NodeRepository
from services.launcher.agent.sandbox.sandbox import (
    Sandbox,
    SandboxConfig,
    SandboxProblem,
    needed_mounts,
    open_sandbox,
)
from services.launcher.agent.settings import Settings, tidy_state_dir
from services.launcher.log_retention import SWEEP_EVERY_S, LogRetention
from services.launcher.task_logs import LogServer
from shared.bus import ConsumerConfig, ConsumerSpec, run_consumer
from shared.bus.identities import node_consumers
from shared.bus.streams import JOBS
from shared.db.credentials import SecretFileProblem, read_secret_file
from shared.db.pool import Database
from shared.gpu_sharing import FRACTION_MODES, GpuSharingSettings
from shared.interactive.protocol import INTERACTIVE_QUEUE, open_subject
from shared.node_logs import LOGS_QUEUE, logs_subject
from shared.service import every, run_service, service_resources

log = logging.getLogger(__name__)


def assignments_consumers(node_id: str) -> list[ConsumerConfig]:
    """Its node's assignments and stop requests, a consumer each: one filter each, which
    NATS holds the node's identity to (shared/bus/identities.py)."""
    return [
        ConsumerConfig(stream=JOBS.name, durable=durable, filter_subjects=(only,))
        for durable, only in node_consumers(node_id)
    ]


async def serve(
    settings: Settings,
    state_dir: Path,
    sandbox: Sandbox | None,
    isolation_detail: str,
    node_secret: str | None = None,
) -> None:
    try:
        await _serve(settings, state_dir, sandbox, isolation_detail, node_secret)
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


async def _serve(
    settings: Settings,
    state_dir: Path,
    sandbox: Sandbox | None,
    isolation_detail: str,
    node_secret: str | None,
) -> None:
    node_id = settings.agent.node_id

    def records(db: Database) -> NodeRepository:
        return NodeRepository(db, node_id, node_secret)

    async with (
        service_resources(
            f"agent-{node_id}",
            settings.common,
            event_source=SOURCE,
            relay=False,
            liveness=lambda db, name, interval_s: NodeLiveness(records(db), name, interval_s),
            dead_letters=lambda db: NodeDeadLetters(records(db)),
        ) as res,
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
            node_secret=node_secret,
            # (bound late: the server is made just below, with the agent it serves)
            on_task_end=lambda attempt_id: interactive.task_ended(attempt_id),
            artifacts=TaskArtifacts(
                res.bus.nc,
                node_id,
                input_cache_dir(settings),
                max_output_bytes=settings.artifacts.max_task_output_mb * 1024 * 1024,
            ),
            shares=gpu_shares(),
        )
        interactive = InteractiveServer(res.bus.nc, node_id, agent, tg)
        if agent.shares.reader is not None:
            watch = GpuShareWatch(
                agent.shares,
                records(res.db).report_over_limit,
                agent.stop,
                node_id=node_id,
                source=SOURCE,
                grace_s=settings.agent.stop_grace_s,
                record_use=records(res.db).record_gpu_use,
            )
            interval_s = agent.shares.settings.check_interval_s
            tg.create_task(every(interval_s, watch.check, "GPU share check"), name="gpu-shares")
        await agent.register(settings.agent.lease_s, isolation_detail)
        res.start_common_tasks(tg)
        tg.create_task(agent.hold_lease(settings.agent.lease_s), name="lease")
        for consumer in assignments_consumers(node_id):
            spec = ConsumerSpec(consumer, agent.handle)
            tg.create_task(run_consumer(res.bus, spec, res.dead_letters), name=consumer.durable)
        tg.create_task(
            every(settings.agent.reconcile_interval_s, agent.reconcile, "agent reconcile"), name="reconcile"
        )
        retention_hours = settings.agent.log_retention_hours
        logs = LogServer(settings.log_dir, retention_hours)
        tg.create_task(res.bus.answer(logs_subject(node_id), LOGS_QUEUE, logs.answer), name="logs")
        tg.create_task(
            res.bus.answer(open_subject(node_id), INTERACTIVE_QUEUE, interactive.answer), name="interactive"
        )
        retention = LogRetention(
            res.db, settings.log_dir, retention_hours, expired=records(res.db).expired_task_logs
        )
        tg.create_task(every(SWEEP_EVERY_S, retention.sweep, "log retention"), name="log-retention")


def gpu_shares() -> GpuShares:
    """The node's sharers and what reads its GPUs' processes: only where the node's mode
    places fractions of a GPU (elsewhere no task holds a share, and nothing is read)."""
    sharing = GpuSharingSettings()
    reader = open_reader(sharing.processes_file) if sharing.mode in FRACTION_MODES else None
    return GpuShares(sharing, reader)


def input_cache_dir(settings: Settings) -> Path:
    """The node's cache of input blobs: in its work directory, so that inputs are hard
    links to it (one filesystem), and hidden from tasks with the rest of it."""
    return settings.work_dir / ".input-cache"


def node_secret_of(settings: Settings) -> str | None:
    """The node's secret, from its file; None without one (an agent run as the
    database's owner: tests, tools)."""
    path = settings.agent.node_secret_file
    return None if path is None else read_secret_file(path)


def main() -> int:
    settings = Settings()
    try:
        node_secret = node_secret_of(settings)
    except SecretFileProblem as exc:
        print(f"corral agent: {exc}", file=sys.stderr, flush=True)
        return 2
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
    return run_service("agent", lambda: serve(settings, state_dir, sandbox, isolation_detail, node_secret))
