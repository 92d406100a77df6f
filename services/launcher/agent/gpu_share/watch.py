"""Whether each task holding a share of a GPU keeps to it: the agent's check, every few
seconds, of every shared GPU's processes and the memory each uses.

What a mode enforces by itself differs (``shared/gpu_sharing.py``): time-slicing nothing,
MPS and HAMi-core only what a well-behaved CUDA program lets them. So the agent checks
every mode alike, from the driver's own account: every ``check_interval_s`` it reads, for
each GPU a sharer holds, the processes with a context on it and the device memory each
uses (``processes.py``: NVML, or the scripted stand-in on simulated GPUs), sums that
memory per task, and compares it with the task's share (``GpuShares.limit_mb``: its
``gpu_memory_mb``, else its fraction of the GPU's memory). It checks memory only: a
sharer's compute is the mode's to cap, and a busy neighbour slows a task but does not
fail it; too much memory does (the other sharers' allocations fail).

A task over its share is told of once per attempt, as ``corral.task.over_limit.v1``
(``launcher.node_report_over_limit``, migration 0037; the alerter makes it an alert for
the job's owner), and then, by the node's ``over_limit`` policy, stopped (``kill``: its
attempt fails, classified ``gpu_over_limit``, permanent, its reason saying how much it
used of what share) or left running (``warn``). The check is after the fact: between
two checks a task may hold more than its share, and a sharer whose allocation failed
meanwhile fails on its own. Each sharer's use and share are gauges
(``corral_agent_gpu_share_used_bytes``, ``..._limit_bytes``), while it runs; its use is
also recorded on its attempt (``launcher.node_record_gpu_use``, migration 0038) whenever
it has moved by more than ``RECORD_MOVE_MB`` or ``RECORD_MOVE_SHARE`` of itself, for the
API and the portal to show beside its share.

Which task a process is (NVML reports the host's pids; the agent runs in the host's pid
namespace):

- a sandboxed task: the process is in the task's cgroup (``TaskCgroup.processes``),
  which every process the task makes joins, however it forks or daemonises, and which a
  task cannot leave;
- an unsandboxed task: the process is in the session the agent started the task in (its
  wrapper is the session's leader, ``processes.spawn``: the session's id is the task's
  pid). A process that calls ``setsid`` itself leaves it and is not counted: unsandboxed,
  nothing confines a task, so this counts what a task does not hide;
- any other process (another node user's, the MPS server's) is nobody's share, and not
  counted against any task.

Concurrency: one loop (``check``, run by ``shared.service.every`` under the agent's
TaskGroup); the readings and ``/proc`` and cgroup reads run in a worker thread, as NVML's
calls block. ``GpuShares.sharers`` is copied before the thread reads it; a task that
ends meanwhile is measured once more, harmlessly (its report is refused once it is not
RUNNING).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from services.launcher import metrics
from services.launcher.agent.gpu_share.processes import MIB
from services.launcher.agent.gpu_share.shares import GpuShares
from services.launcher.agent.tasks import Task
from shared.aio import raise_if_cancelling
from shared.db.pool import DATABASE_ERRORS
from shared.events.jobs import TaskOverLimit, TaskOverLimitData
from shared.jobs import Resources

log = logging.getLogger(__name__)

OVER_LIMIT_PLATFORM = "gpu_over_limit"

ReportOverLimit = Callable[[TaskOverLimit], Awaitable[bool]]
RecordUse = Callable[[dict[str, int]], Awaitable[int]]
StopTask = Callable[..., None]
# A sharer's use is recorded (for the API and the portal) when it has moved by more than
# this many MiB or this share of itself: about as often as its allocations change.
RECORD_MOVE_MB = 64
RECORD_MOVE_SHARE = 0.05


@dataclass(frozen=True)
class ShareUse:
    """What one sharer's processes used of its GPU's memory, as last read."""

    task: Task
    resources: Resources
    gpu: int
    used_mb: int
    limit_mb: int

    @property
    def over(self) -> bool:
        return self.used_mb > self.limit_mb

    def reason(self) -> str:
        """Why it is stopped, as its attempt's end says it."""
        fraction = f"{self.resources.gpu_milli / 1000:g} of the GPU"
        share = fraction if self.resources.gpu_memory_mb is None else "its gpu_memory_mb"
        return (
            f"used {self.used_mb} MiB of GPU {self.gpu}, its share is {self.limit_mb} MiB ({share}): "
            "ask for a larger share (resources.gpus, resources.gpu_memory_mb) or use less"
        )


def process_owners(
    sharers: Iterable[Task], pids: Iterable[int], session_of: Callable[[int], int] = os.getsid
) -> dict[int, str]:
    """The attempt of each of ``pids`` that is a process of one of ``sharers`` (the rule
    is the module docstring's); the others are left out. Reads cgroups and ``/proc``."""
    in_cgroup: dict[int, str] = {}
    sessions: dict[int, str] = {}
    for task in sharers:
        if task.cgroup is not None:
            in_cgroup.update(dict.fromkeys(task.cgroup.processes(), task.attempt_id))
        elif task.pid is not None:
            sessions[task.pid] = task.attempt_id
    owners: dict[int, str] = {}
    for pid in pids:
        if pid in in_cgroup:
            owners[pid] = in_cgroup[pid]
        elif sessions:
            try:
                session = session_of(pid)
            except OSError:  # gone since the driver listed it
                continue
            if session in sessions:
                owners[pid] = sessions[session]
    return owners


def measure(shares: GpuShares, sharers: list[tuple[Task, Resources]]) -> list[ShareUse]:
    """Each running sharer's use of its GPU (blocking: NVML, cgroups and ``/proc``). A
    GPU that cannot be read is left out this time, its sharers unmeasured."""
    reader = shares.reader
    on_gpu: dict[int, list[tuple[Task, Resources]]] = {}
    for task, resources in sharers:
        if len(task.gpu_indices) == 1 and task.pid is not None and not task.ended:
            on_gpu.setdefault(task.gpu_indices[0], []).append((task, resources))
    uses: list[ShareUse] = []
    if reader is None:
        return uses
    for gpu, here in sorted(on_gpu.items()):
        try:
            processes = reader.processes(gpu)
            limits = [shares.limit_mb(resources, gpu) for _, resources in here]
        except Exception as exc:  # a driver's error (a GPU fell off the bus): the monitor says so
            log.warning("could not read the processes of GPU %d (%s); its sharers go unchecked", gpu, exc)
            continue
        owners = process_owners([task for task, _ in here], [pid for pid, _ in processes])
        used: Counter[str] = Counter()
        for pid, memory_mb in processes:
            if pid in owners:
                used[owners[pid]] += memory_mb
        for (task, resources), limit_mb in zip(here, limits, strict=True):
            uses.append(ShareUse(task, resources, gpu, used[task.attempt_id], limit_mb))
    return uses


class GpuShareWatch:
    """The node's check of its sharers (the module docstring)."""

    def __init__(
        self,
        shares: GpuShares,
        report: ReportOverLimit,
        stop: StopTask,
        *,
        node_id: str,
        source: str,
        grace_s: float,
        record_use: RecordUse | None = None,
    ) -> None:
        self._shares = shares
        self._report = report
        self._stop = stop
        self._node_id = node_id
        self._source = source
        self._grace_s = grace_s
        self._record_use = record_use
        self._recorded: dict[str, int] = {}  # each sharer's use (MiB) as last recorded
        self._told: set[str] = set()  # attempts whose over_limit is written
        self._shown: dict[str, tuple[str, str, str]] = {}  # each sharer's gauges' labels

    async def check(self) -> None:
        """Measure every sharer once; tell of (and stop, by the policy) one over its share."""
        sharers = list(self._shares.sharers.values())
        uses = await asyncio.to_thread(measure, self._shares, sharers) if sharers else []
        running = set(self._shares.sharers)
        self._told &= running
        self._show(uses, running)
        await self._record(uses, running)
        for use in uses:
            if use.over and use.task.attempt_id not in self._told:
                await self._act(use)

    async def _act(self, use: ShareUse) -> None:
        task = use.task
        kill = self._shares.settings.over_limit == "kill"
        over = TaskOverLimit(
            source=self._source,
            subject=task.attempt_id,
            data=TaskOverLimitData(
                attempt_id=task.attempt_id,
                job_id=task.job_id,
                node_id=self._node_id,
                gpu_index=use.gpu,
                used_mb=use.used_mb,
                limit_mb=use.limit_mb,
                action="killed" if kill else "warned",
            ),
        )
        log.warning("attempt %s %s (%s)", task.attempt_id, use.reason(), over.data.action)
        try:
            # Told first, so the event comes before the task's end; a stop needs no database.
            await self._report(over)
            self._told.add(task.attempt_id)  # (or it is not RUNNING any more: nothing to tell)
        except DATABASE_ERRORS as exc:
            raise_if_cancelling()
            log.warning("could not tell of %s over its GPU share (%s); trying again", task.attempt_id, exc)
        if kill:
            self._stop(task.attempt_id, use.reason(), self._grace_s, platform=OVER_LIMIT_PLATFORM)

    async def _record(self, uses: list[ShareUse], running: set[str]) -> None:
        """Record the uses that moved since last recorded (``RECORD_MOVE_*``)."""
        self._recorded = {a: used for a, used in self._recorded.items() if a in running}
        if self._record_use is None:
            return
        moved = {}
        for use in uses:
            before = self._recorded.get(use.task.attempt_id)
            if before is None or abs(use.used_mb - before) > max(RECORD_MOVE_MB, before * RECORD_MOVE_SHARE):
                moved[use.task.attempt_id] = use.used_mb
        if not moved:
            return
        try:
            await self._record_use(moved)
        except DATABASE_ERRORS as exc:  # the next check records it
            raise_if_cancelling()
            log.warning("could not record the GPU use of %d sharer(s) (%s)", len(moved), exc)
            return
        self._recorded.update(moved)

    def _show(self, uses: list[ShareUse], running: set[str]) -> None:
        for use in uses:
            labels = (use.task.job_id, use.task.attempt_id, str(use.gpu))
            self._shown[use.task.attempt_id] = labels
            metrics.GPU_SHARE_USED.labels(*labels).set(use.used_mb * MIB)
            metrics.GPU_SHARE_LIMIT.labels(*labels).set(use.limit_mb * MIB)
        for attempt_id in set(self._shown) - running:
            labels = self._shown.pop(attempt_id)
            metrics.GPU_SHARE_USED.remove(*labels)
            metrics.GPU_SHARE_LIMIT.remove(*labels)
