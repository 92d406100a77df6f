"""Composition root of the launcher service: its consumer, the decisions of jobs whose
attempts ended on a node (``attempt_ends.py``) and its reconcile loop; with
``CORRAL_LAUNCHER_DRIVER=kubernetes``, also the Kubernetes runner (the node agents' part,
played through Pods: ``kubernetes/runner.py``) and exec / port-forward into its pods
(``kubernetes/interactive.py``). Several launcher processes may share the work
(``shards.py``)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from contextlib import AsyncExitStack
from functools import partial

from services.launcher.artifacts.repository import ArtifactRecords
from services.launcher.artifacts.server import ArtifactServer
from services.launcher.artifacts.staging import SWEEP_EVERY_S as SWEEP_UPLOADS_EVERY_S
from services.launcher.artifacts.staging import Staging
from services.launcher.attempt_ends import AttemptEnds
from services.launcher.handlers import CONSUMER, LauncherHandlers
from services.launcher.kubernetes.driver import KubernetesDriver, cluster_configuration
from services.launcher.kubernetes.exec import PodSockets
from services.launcher.kubernetes.interactive import PodInteractive
from services.launcher.kubernetes.runner import KubernetesRunner
from services.launcher.log_retention import SWEEP_EVERY_S, LogRetention
from services.launcher.reconcile import reconcile
from services.launcher.settings import Settings
from services.launcher.task_logs import LogServer, answer_for_nodes
from shared.artifacts.store import open_store
from shared.bus import ConsumerConfig, ConsumerSpec, run_consumer
from shared.bus.streams import JOBS
from shared.db.pool import Database
from shared.events import TaskAssigned, TaskStopRequested, subjects_of
from shared.idempotency import FORGET_EVERY_S, forget_processed
from shared.service import ServiceResources, every, run_service, service_resources

log = logging.getLogger(__name__)


async def repair(db: Database, lease_s: float) -> None:
    """Repair what lost events left behind (on start, then periodically)."""
    repaired = await reconcile(db, lease_s)
    if any(repaired.values()):
        log.info("reconciled: %s", repaired)


async def serve(settings: Settings) -> None:
    shard = settings.launcher.shard
    async with (
        service_resources("launcher", settings.common, relay_answers=shard.owns_partition) as res,
        AsyncExitStack() as stack,
    ):
        handlers = LauncherHandlers(res.db)
        runner = None
        sockets = None
        if settings.launcher.driver == "kubernetes" and shard.first:
            configuration = await cluster_configuration()
            driver = KubernetesDriver(configuration, settings.kubernetes)
            stack.push_async_callback(driver.close)
            sockets = PodSockets(configuration, settings.kubernetes.namespace)
            stack.push_async_callback(sockets.close)
            runner = KubernetesRunner(
                res.db,
                driver,
                log_dir=settings.log_dir,  # its own: it answers for these logs (run_on_kubernetes)
                node_pattern=settings.kubernetes.node_pattern,
                stop_grace_s=settings.agent.stop_grace_s,
            )
            await runner.hold_leases(settings.agent.lease_s)
        side_by_side = settings.launcher.placement_concurrency
        consumer = dataclasses.replace(CONSUMER, sharers=shard.count)  # (all launchers pull from it)
        consumer_spec = ConsumerSpec(consumer, handlers.handle, concurrency=side_by_side)
        async with asyncio.TaskGroup() as tg:
            res.start_common_tasks(tg)
            if runner is not None and sockets is not None:
                run_on_kubernetes(tg, res, runner, PodInteractive(res.bus, sockets), settings)
            tg.create_task(
                run_consumer(res.bus, consumer_spec, res.dead_letters),
                name="consumer",
            )
            serve_artifacts(tg, res, settings)
            ends = AttemptEnds(res.db, concurrency=settings.launcher.decide_concurrency, shard=shard)
            tg.create_task(ends.run(), name="attempt-ends")
            tg.create_task(
                every(FORGET_EVERY_S, partial(forget_processed, res.db), "processed events upkeep"),
                name="processed-events",
            )
            tg.create_task(
                every(
                    settings.launcher.reconcile_interval_s,
                    lambda: repair(res.db, settings.agent.lease_s),
                    "reconcile",
                ),
                name="reconcile",
            )


def serve_artifacts(tg: asyncio.TaskGroup, res: ServiceResources, settings: Settings) -> None:
    """Answer the nodes' artifact uploads and downloads (``artifacts/server.py``), and
    sweep the uploads they abandoned."""
    home = settings.common.paths.home
    staging = Staging(settings.artifacts.staging(home))
    store = open_store(settings.artifacts, home)
    most = settings.artifacts.max_task_output_mb * 1024 * 1024
    server = ArtifactServer(ArtifactRecords(res.db), store, staging, max_blob_bytes=most)
    tg.create_task(server.serve(res.bus.nc), name="artifacts")
    tg.create_task(every(SWEEP_UPLOADS_EVERY_S, staging.sweep, "upload staging sweep"), name="upload-sweep")


KUBERNETES_ASSIGNMENTS = ConsumerConfig(
    stream=JOBS.name,
    durable="kubernetes-runner",
    filter_subjects=subjects_of(TaskAssigned, TaskStopRequested),
)


def run_on_kubernetes(
    tg: asyncio.TaskGroup,
    res: ServiceResources,
    runner: KubernetesRunner,
    interactive: PodInteractive,
    settings: Settings,
) -> None:
    """Play the node agents' part for the cluster's nodes: tasks become Pods, their logs
    are answered for on each node's ``corral.logs.<node>`` and exec / port-forward on its
    ``corral.interactive.<node>.open``, as an agent would."""
    lease_s = settings.agent.lease_s
    tg.create_task(every(lease_s / 3, lambda: runner.hold_leases(lease_s), "node leases"), name="leases")
    retention_hours = settings.agent.log_retention_hours
    logs = LogServer(settings.log_dir, retention_hours)
    tg.create_task(answer_for_nodes(res.bus, logs, runner.epochs.keys, lease_s / 3), name="pod-logs")
    tg.create_task(interactive.serve(runner.epochs.keys, lease_s / 3), name="pod-interactive")
    retention = LogRetention(res.db, settings.log_dir, retention_hours)
    tg.create_task(every(SWEEP_EVERY_S, retention.sweep, "log retention"), name="log-retention")
    spec = ConsumerSpec(KUBERNETES_ASSIGNMENTS, runner.handle)
    tg.create_task(run_consumer(res.bus, spec, res.dead_letters), name="kubernetes-assignments")
    tg.create_task(runner.follow(), name="pod-watch")
    tg.create_task(
        every(settings.launcher.reconcile_interval_s, runner.reconcile, "pod reconcile"), name="pod-reconcile"
    )


def main() -> int:
    settings = Settings()
    return run_service("launcher", lambda: serve(settings))
