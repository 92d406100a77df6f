"""``KubernetesRunner``: the node agent's part, played for nodes that Kubernetes runs.

With ``CORRAL_LAUNCHER_DRIVER=kubernetes`` the launcher service runs one of these for the
whole cluster instead of a node agent per machine: the kubelet runs the processes, and
the runner turns Corral's assignments into Pods (``KubernetesDriver``) and the pods'
fate back into Corral's reports. Everything that keeps the local driver honest holds
here too, through the very same queries:

- **Leases**: the runner holds a node agent's lease (``launcher.agents``, an epoch) for
  every node the monitor knows whose id matches ``CORRAL_KUBERNETES_NODE_PATTERN`` — so
  the scheduler places work on them, and a runner that dies has its nodes declared lost
  and their attempts retried, as a dead agent would.
- **No double launch**: an assignment is claimed with the fenced ``claim_attempt``
  (ASSIGNED → STARTING, this node, this epoch) before its Pod is created, and the pod is
  named by the attempt id, so neither a redelivered event nor a second runner creates a
  second pod.
- **Reports**: the driver's watch says when a pod runs (RUNNING, ``task.started``) and
  how it ended (EXITED or LOST, ``task.exited``), classified by the same exit-code table
  with the conditions only the cluster sees (``oom_killed``, ``evicted``,
  ``image_pull_failed``, ``node_lost``...) and the tail of the pod's log.
- **Logs**: each running pod's log is appended to its attempt's log file, the node
  agent's layout under ``CORRAL_AGENT_LOG_DIR``, recorded as ``log_path`` when the pod
  runs, so it outlives the pod (``pod_logs.py``), and the launcher answers the API's
  requests for it on the node's ``corral.logs.<node>`` as an agent would
  (``task_logs.py``, ``app.run_on_kubernetes``). An attempt's end is recorded once its
  log has been read to the end, so a client following it gets the last lines. After a
  restart, the watch's first list finds the running pods again and their followers
  resume where the files end.
- **MPI jobs**: a claimed attempt of one is started with its generation's wiring
  (``mpi.py``: the ssh keys read from ``launcher.job_ssh_keys``, the workers' ports).
- **Reconcile**: periodically, the live attempts of its nodes against the pods: pods
  nobody expects are deleted, assignments not yet started are started, and attempts
  that should run but whose pod is gone are reported lost (and so retried).

Not here: GPU indices (the device plugin picks the GPUs; ``CUDA_VISIBLE_DEVICES`` counts
them).

Concurrency: ``follow`` is a root task; its task group holds the log followers (one per
running pod) and the reports of ended pods waiting for their logs, so the watch never
waits on a log.
"""

from __future__ import annotations

import asyncio
import logging
import re
from contextlib import aclosing
from pathlib import Path
from typing import Any

from services.launcher import repository
from services.launcher.agent.environment import Peer, task_environment
from services.launcher.drivers import TaskEnded, TaskLaunch, TaskObserved
from services.launcher.exit_codes import LOG_TAIL_BYTES, TaskEnd, classify, read_log_tail
from services.launcher.kubernetes.driver import KubernetesDriver, KubernetesDriverError
from services.launcher.kubernetes.manifests import ManifestError, storage_mounts
from services.launcher.kubernetes.mpi import mpi_wiring
from services.launcher.kubernetes.pod_logs import PodLogs
from services.launcher.reporting import peers_of, report_end, report_started
from shared.aio import raise_if_cancelling
from shared.db.pool import DATABASE_ERRORS, Database
from shared.events import Event, TaskAssigned, TaskStopRequested
from shared.jobs import JobSpec

log = logging.getLogger(__name__)
# How a node run through Kubernetes isolates its tasks (``corral nodes``; manifests.py).
POD_ISOLATION = (
    "each task in a pod: a non-root uid, no privilege escalation, no capabilities, "
    "a read-only root, no service account token, requests equal to limits"
)
SOURCE = "corral/kubernetes-runner"


class KubernetesRunner:
    def __init__(
        self,
        db: Database,
        driver: KubernetesDriver,
        *,
        log_dir: Path,
        node_pattern: str = ".*",
        stop_grace_s: float = 30.0,
    ) -> None:
        self._db = db
        self._driver = driver
        self._log_dir = log_dir
        self._logs = PodLogs(driver)
        self._tg: asyncio.TaskGroup | None = None  # follow's: the log followers run there
        self._node_pattern = node_pattern
        re.compile(node_pattern)  # a bad pattern fails the start, not every lease renewal
        self._grace_s = stop_grace_s
        self.epochs: dict[str, int] = {}  # node -> the lease epoch this runner holds
        self._starting: set[str] = set()  # claimed, pod not yet created: not "gone"

    # --- leases ----------------------------------------------------------------------

    async def hold_leases(self, lease_s: float) -> None:
        """Take a lease on every matching node not yet held; renew the others. A lease
        that was lost (the runner was out of contact) is taken again with a new epoch:
        what the old one held was retried elsewhere, and reconcile deletes its pods."""
        async with self._db.transaction() as conn:
            for node_id in await repository.nodes_to_run(conn, self._node_pattern):
                epoch = self.epochs.get(node_id)
                renewed = epoch is not None and await repository.renew_lease(conn, node_id, epoch, lease_s)
                if not renewed:
                    self.epochs[node_id] = await repository.register_agent(
                        conn, node_id, lease_s, "pod", POD_ISOLATION, 0
                    )
                    log.info("running node %s on Kubernetes (lease epoch %s)", node_id, self.epochs[node_id])

    # --- assignments -----------------------------------------------------------------

    async def handle(self, event: Event) -> None:
        match event:
            case TaskAssigned(data=data) if data.node_id in self.epochs:
                await self.start_attempt(data.attempt_id, data.node_id)
            case TaskStopRequested(data=data) if data.node_id in self.epochs:
                log.info("stopping attempt %s: %s", data.attempt_id, data.reason)
                await self._driver.stop(data.attempt_id, data.grace_s)
            case _:
                pass

    async def start_attempt(self, attempt_id: str, node_id: str) -> None:
        """Claim the attempt (fenced) and create its pod; False-free: a claim that finds
        nothing (already started, stopped, not ours) does nothing."""
        self._starting.add(attempt_id)
        try:
            row = await repository.claim_attempt(self._db, attempt_id, node_id, self.epochs[node_id])
            if row is None:
                return
            peers = peers_of(row)
            try:
                launch = _launch(row, node_id, peers)
                await self._driver.start(launch, await mpi_wiring(self._db, row, peers))
            except (KubernetesDriverError, ManifestError) as exc:
                log.error("%s", exc)
                await self._report(attempt_id, TaskEnded(None, platform="start_failed", reason=str(exc)))
        finally:
            self._starting.discard(attempt_id)

    # --- what the pods say -----------------------------------------------------------

    async def follow(self) -> None:
        """Report every change the driver's watch sees, and follow the running pods'
        logs (a root task: runs forever)."""
        async with asyncio.TaskGroup() as tg, aclosing(self._driver.watch()) as changes:
            self._tg = tg
            async for observed in changes:
                if observed.ended is not None and self._logs.following(observed.attempt_id):
                    tg.create_task(self._after_log(observed), name=f"end of {observed.attempt_id}")
                else:
                    await self._until_recorded(observed)

    async def _after_log(self, observed: TaskObserved) -> None:
        """Record a pod's end once its log is in the file: a client following the log
        stops at the attempt's end, and must have had every line by then."""
        await self._logs.drained(observed.attempt_id, self._driver.settings.log_drain_timeout_s)
        await self._until_recorded(observed)

    async def _until_recorded(self, observed: TaskObserved) -> None:
        while True:  # an outcome must not be lost while Postgres is away
            try:
                if observed.ended is not None:
                    await self._report(observed.attempt_id, observed.ended)
                elif observed.readiness is not None:
                    await self._record_readiness(observed.attempt_id, *observed.readiness)
                elif observed.running:
                    await self._report_running(observed.attempt_id)
                return
            except DATABASE_ERRORS as exc:
                raise_if_cancelling()
                log.warning("could not record what %s's pod did (%s); retrying", observed.attempt_id, exc)
                await asyncio.sleep(1.0)

    async def _report_running(self, attempt_id: str) -> None:
        row = await repository.attempt_for_report(self._db, attempt_id)
        if row is None or row["node_id"] not in self.epochs:
            return
        path = self._log_path(row)
        if row["state"] in ("STARTING", "RUNNING") and self._tg is not None:
            # Also after a restart (RUNNING already): the follower resumes the file.
            self._logs.follow(self._tg, attempt_id, path)
        # Fenced (its node, from STARTING): a RUNNING attempt or one taken meanwhile is left.
        await report_started(
            self._db,
            SOURCE,
            attempt_id=attempt_id,
            job_id=row["job_id"],
            generation=row["generation"],
            node_id=row["node_id"],
            pid=None,
            pid_start_ticks=None,
            log_path=str(path),
        )

    async def _record_readiness(self, attempt_id: str, ready: bool, detail: str) -> None:
        """A replica's pod became ready or stopped being so (fenced: its node, RUNNING)."""
        row = await repository.attempt_for_report(self._db, attempt_id)
        if row is not None and row["node_id"] in self.epochs:
            await repository.set_readiness(self._db, attempt_id, row["node_id"], ready, detail)

    def _log_path(self, row: Any) -> Path:
        """The attempt's log file: where it was recorded, else the node agent's layout."""
        if row["log_path"]:
            return Path(row["log_path"])
        job, task = str(row["job_id"]), f"{row['task_role']}-{row['task_index']}"
        return self._log_dir / job / task / f"attempt-{row['attempt_no']}.log"

    async def _report(self, attempt_id: str, ended: TaskEnded) -> None:
        row = await repository.attempt_for_report(self._db, attempt_id)
        if row is None or row["node_id"] not in self.epochs or row["state"] not in ("STARTING", "RUNNING"):
            return  # not ours, or already settled (a repeated report changes nothing)
        spec = JobSpec.model_validate(row["spec"])
        # A pod the platform stopped (preempted, its GPU lost) ends like any deleted pod;
        # what the pod's status says comes first, then why the platform stopped it.
        platform = ended.platform or row["stop_platform"]
        tail = await self._log_tail(attempt_id, row["log_path"])
        verdict = classify(
            TaskEnd(ended.exit_code, ended.signal, platform, tail),
            spec.retry.rules,
        )
        reason = ended.reason or verdict.reason
        if row["stop_reason"]:
            reason = f"stopped: {row['stop_reason']}"
        lost = ended.exit_code is None and ended.signal is None and platform in (None, "task_lost")
        reported = await report_end(
            self._db,
            SOURCE,
            attempt_id=attempt_id,
            job_id=row["job_id"],
            node_id=row["node_id"],
            lost=lost,
            exit_code=ended.exit_code,
            signal=ended.signal,
            reason=reason,
            classification=verdict.classification,
        )
        if reported:
            log.info("attempt %s ended: %s (%s)", attempt_id, reason, verdict.classification)
        if row["log_path"]:
            await self._logs.settle(attempt_id, Path(row["log_path"]))

    async def _log_tail(self, attempt_id: str, log_path: str | None) -> str:
        """The end of the pod's log, for the exit-code table's log rules ('' if none):
        from its file when it has one, else from the API server."""
        if log_path:
            return await asyncio.to_thread(read_log_tail, Path(log_path))
        tail = b""
        try:
            async with aclosing(await self._driver.logs(attempt_id, follow=False)) as chunks:  # type: ignore[type-var]
                async for chunk in chunks:
                    tail = (tail + chunk)[-LOG_TAIL_BYTES:]
        except (KubernetesDriverError, OSError) as exc:
            log.info("no log for %s (%s)", attempt_id, exc)
        return tail.decode(errors="replace")

    # --- reconcile -------------------------------------------------------------------

    async def reconcile(self) -> None:
        """The live attempts of this runner's nodes against the pods (periodically)."""
        rows = await repository.live_attempts_on_nodes(self._db, list(self.epochs))
        expected = {r["id"] for r in rows if r["state"] != "ASSIGNED"} | self._starting
        present = await self._driver.reconcile(expected)
        for row in rows:
            attempt_id = row["id"]
            if row["state"] == "ASSIGNED":
                await self.start_attempt(attempt_id, row["node_id"])
            elif row["stop_requested_at"] is not None and attempt_id in present:
                await self._driver.stop(attempt_id, self._grace_s)
            elif attempt_id not in present and attempt_id not in self._starting:
                reason = "its pod is gone (deleted, or never created before the runner restarted)"
                await self._report(attempt_id, TaskEnded(None, platform="task_lost", reason=reason))


def _launch(row: dict[str, Any], node_id: str, peers: list[Peer]) -> TaskLaunch:
    """A claimed attempt as the driver takes it: the environment the node agent would
    give it (without this process's own variables: a container keeps its image's)."""
    spec = JobSpec.model_validate(row["spec"])
    if spec.ssh is not None:
        # Said at the start, never run without it: a command that runs `ssh worker-1`
        # would fail in a way that blames the user.
        raise ManifestError(
            "the job asks for ssh between or into its tasks (ssh, OpenPAI's ssh plugin), which node"
            " agents wire and the Kubernetes driver does not yet; run it on a node agent's nodes,"
            " or drop ssh (framework: mpi wires ssh on Kubernetes too)"
        )
    role, index = row["task_role"], row["task_index"]
    task_role = next(r for r in spec.tasks if r.name == role)
    gpu_indices = list(row["gpu_indices"])
    env = task_environment(
        spec,
        job_id=row["job_id"],
        role=role,
        task_index=index,
        attempt_id=row["id"],
        attempt_no=row["attempt_no"],
        gpu_indices=gpu_indices,
        peers=peers,
        inherit_host=False,
        secrets=row["secrets"],
    )
    me = next((p for p in peers if (p.role, p.index) == (role, index)), None)
    return TaskLaunch(
        attempt_id=row["id"],
        job_id=row["job_id"],
        generation=row["generation"],
        task_role=role,
        task_index=index,
        attempt_no=row["attempt_no"],
        node_id=node_id,
        command=task_role.command,
        env=env,
        gpu_indices=tuple(gpu_indices),
        gpus=task_role.resources.gpu_devices,
        gpu_milli=task_role.resources.gpu_milli,
        gpu_memory_mb=task_role.resources.gpu_memory_mb,
        cpus=task_role.resources.cpus,
        memory_mb=task_role.resources.memory_mb,
        image=task_role.image,
        ports=me.ports if me else {},
        max_runtime_s=spec.max_runtime_s,
        service=spec.service if spec.kind == "service" else None,
        storage=storage_mounts(spec, row["storage"]),
        shm_mb=task_role.shm_mb,
        fetch=tuple(task_role.fetch),
    )
