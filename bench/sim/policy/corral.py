"""Corral's policy in the simulator: the live scheduler's ``planner.plan`` behind the
``Policy`` protocol.

One implementation: ``bench.simulate --policy corral`` replays a trace through the very
code the live service runs each cycle, so its figures are the live service's (least
attained service, the starvation guard, moves; planner.py), not a model's. Each
round builds the snapshot a live cycle reads from Postgres — ready nodes with their free
GPUs, running jobs with their slices, run time and attained service, pending jobs in
submission order with theirs — calls ``plan`` and applies its decisions to the
simulator's cluster and jobs. A trace has no quotas: every job is in VC ``default`` (no
quota, so it runs as borrowed), its trace VC is its user (fair share between them), all
at one priority; a gang of up to a node's GPUs is one task, a bigger one whole nodes.

Preemptions stop their victims at once (the simulator's assumption for every policy) and
the planner runs again in the same instant, as the live cycle is woken by the stop, so
the job that asked is placed without waiting for the next arrival or completion.
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from operator import attrgetter

from bench.sim.policy.base import Round
from bench.sim.policy.cluster import Cluster, Placement, Slice
from bench.sim.policy.jobs import Job
from services.scheduler.model import (
    NodeCapacity,
    PendingJob,
    PlanSettings,
    RunningJob,
    TaskDemand,
)
from services.scheduler.planner import plan
from services.scheduler.settings import SchedulerSettings
from services.scheduler.starvation import StarvationRule, TypicalWait

GPU_TYPE = "GPU"
MAX_REPLANS = 4  # rounds of "preempt, then place" in one instant


class CorralPolicy:
    name = "corral"
    preemptive = True

    def __init__(
        self, settings: PlanSettings | None = None, starvation: StarvationRule | None = None
    ) -> None:
        """Without arguments: the live scheduler's policy as its ``CORRAL_SCHEDULER_*``
        settings configure it (settings.py), so that, for instance,
        ``CORRAL_SCHEDULER_MOVE_TO_DEFRAGMENT=false python -m bench.simulate ...`` replays it
        without moves. ``settings`` given: those, with the fixed starvation limit in them
        unless ``starvation`` (the load-aware limit) is given too."""
        if settings is None:
            configured = SchedulerSettings()
            settings, starvation = configured.plan_settings(), starvation or configured.starvation()
        self.settings = settings
        self.starvation = starvation
        self.typical = TypicalWait(self.starvation.window_s if self.starvation else 1.0)
        # Not in submission order once a preempted job comes back: ``_in_submission_order``.
        self.pending: dict[str, Job] = {}
        self.running: dict[str, Job] = {}
        self.promoted: set[str] = set()  # running jobs placed as promoted (allocations.promoted)
        # By job id, what ``_pending_job`` and ``_running_job`` would build the same way every
        # round: rebuilding them for every job every round would be most of a replay's time.
        self._first_snapshot: dict[str, PendingJob] = {}
        self._running_snapshot: dict[str, RunningJob] = {}  # dropped when the job stops
        self._per_node = 8

    def submit(self, job: Job, now: float) -> None:
        self.pending[job.id] = job

    def finished(self, job: Job, now: float) -> None:
        self.running.pop(job.id, None)
        self._first_snapshot.pop(job.id, None)
        self._running_snapshot.pop(job.id, None)
        self.typical.finished(now, job.waited_s)
        self.promoted.discard(job.id)

    def wake_at(self, job: Job, now: float) -> float | None:
        """When a running job's attained service crosses its next threshold: its service
        level then rises, and jobs below it may preempt it."""
        if not job.running:
            return None
        thresholds = self.settings.service_thresholds_gpu_s
        attained = job.attained_at(now)
        nxt = bisect.bisect_right(thresholds, attained)
        if nxt == len(thresholds):
            return None
        return now + (thresholds[nxt] - attained) / job.gpus

    def schedule(self, now: float, cluster: Cluster) -> Round:
        decided = Round()
        self._per_node = cluster.gpus_per_node
        settings = self.settings
        if self.starvation is not None:
            settings = replace(
                settings,
                starve_after_s=self.starvation.limit(self.typical.value),
            )
        for _ in range(MAX_REPLANS):
            if not self.pending:
                break
            result = plan(
                [self._pending_job(job, now) for job in self._in_submission_order()],
                self._nodes(cluster),
                running=[self._running_job(job, now) for job in self.running.values()],
                settings=settings,
            )
            for decision in result.decisions:
                job = self.pending.pop(decision.job.job_id)
                if decision.promoted:
                    self.promoted.add(job.id)
                placement = Placement(
                    tuple(Slice(int(p.node_id), p.gpu_indices) for p in decision.placements if p.gpu_indices)
                )
                cluster.claim(placement)
                job.start(now, placement)
                self.running[job.id] = job
                decided.started.append(job)
            for preemption in result.preemptions:
                victim = self.running.pop(preemption.job_id)
                self.promoted.discard(victim.id)
                self._running_snapshot.pop(victim.id, None)
                cluster.release(victim.stop(now))
                victim.preemptions += 1
                self.pending[victim.id] = victim
                decided.preempted.append(victim)
            if not result.preemptions:
                break
        return decided

    def _in_submission_order(self) -> list[Job]:
        """The pending jobs as the live cycle reads them (``ORDER BY created_at``): a
        preempted job keeps its place by submission, it does not go to the back. (Sending
        them to the back would cost cluster02 a few per cent of average JCT and make the
        replay a worse model of the live service: docs/performance.md.) Timsort on an
        almost sorted list: about linear."""
        return sorted(self.pending.values(), key=attrgetter("seq"))

    def _nodes(self, cluster: Cluster) -> list[NodeCapacity]:
        return [
            NodeCapacity(
                str(node),
                list(cluster.free_gpus_on(node)),
                total_gpus=cluster.gpus_per_node,
                gpu_type=GPU_TYPE,
            )
            for node in range(cluster.nodes)
        ]

    def _tasks(self, gpus: int, per_node: int) -> tuple[TaskDemand, ...]:
        if gpus <= per_node:
            return (TaskDemand("main", 1, gpus),)
        whole, rest = divmod(gpus, per_node)
        return (TaskDemand("main", whole, per_node),) + ((TaskDemand("rest", 1, rest),) if rest else ())

    def _pending_job(self, job: Job, now: float) -> PendingJob:
        """As the live cycle reads a job it read before: built once, then copied with what
        changed (``PendingJob.progressed``)."""
        first = self._first_snapshot.get(job.id)
        if first is None:
            first = self._first_snapshot[job.id] = PendingJob(
                job.id, 1, 0, self._tasks(job.gpus, self._per_node), user=job.vc, gpu_type=GPU_TYPE
            )
        return first.progressed(1, 0, job.attained_gpu_s, job.waited_at(now))

    def _running_job(self, job: Job, now: float) -> RunningJob:
        """Built the first round after each placement, then brought up to date in place:
        the planner reads a ``RunningJob`` only while ``plan`` runs, and its result names
        jobs by id, so nothing holds on to the last round's values."""
        snapshot = self._running_snapshot.get(job.id)
        if snapshot is None:
            assert job.placement is not None
            slices = tuple((str(piece.node), piece.gpus) for piece in job.placement.slices)
            snapshot = RunningJob(job.id, "default", job.vc, 0, GPU_TYPE, slices, borrowed=True)
            self._running_snapshot[job.id] = snapshot
        snapshot.runtime_s = now - job.since_s
        snapshot.attained_gpu_s = job.attained_at(now)
        snapshot.waited_s = job.waited_s
        snapshot.promoted = job.id in self.promoted
        return snapshot
