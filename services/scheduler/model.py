"""What one scheduling cycle decides over: plain records, built from the tables by
``repository.py`` (or by hand in tests and benchmarks), and the decisions it returns.

Nothing here does I/O or reads a clock: ages and run times arrive as numbers of seconds,
so the planner gives the same answer for the same snapshot.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

PendingReason = Literal[
    "WaitingForQuota",  # its VC's guaranteed GPUs are in use, and nothing idle can be borrowed
    "WaitingForPreemption",  # GPUs are being taken back for it (reclaimed or of lower priority)
    "UserLimit",  # its user holds the VC's per-user maximum
    "InsufficientGPUs",
    "GangDoesNotFit",
    "Fragmented",
    "NodesUnhealthy",
    "Priority",  # jobs ahead of it get the GPUs it needs first (took them, wait too, or reserved them)
]
PENDING_REASONS: tuple[PendingReason, ...] = (
    "WaitingForQuota",
    "WaitingForPreemption",
    "UserLimit",
    "InsufficientGPUs",
    "GangDoesNotFit",
    "Fragmented",
    "NodesUnhealthy",
    "Priority",
)

# How the instances of a job may spread (the job spec's ``topology``).
Topology = Literal["pack", "single_node", "one_per_node"]
ANY_TYPE = "*"  # the pool of a job that names no GPU type, in per-type tallies


@dataclass(frozen=True)
class TaskDemand:
    role: str
    instances: int
    gpus: int  # whole GPUs per instance
    cpus: float = 0.0  # per instance; placed only where this much is free (0: none asked)
    memory_mb: int = 0
    # A share of one GPU per instance, in thousandths (1-999; then ``gpus`` is 0): placed on
    # a GPU of a node that shares its GPUs (placement.py), never across GPUs.
    gpu_milli: int = 0


def task_demand(role: str, instances: int, gpus: float, cpus: float = 0.0, memory_mb: int = 0) -> TaskDemand:
    """A role's demand from its spec's ``resources.gpus``: whole GPUs, or a share of one."""
    if 0 < gpus < 1:
        return TaskDemand(role, instances, 0, cpus, memory_mb, round(gpus * 1000))
    return TaskDemand(role, instances, int(gpus), cpus, memory_mb)


@dataclass(frozen=True)
class PendingJob:
    job_id: str
    version: int
    priority: int
    tasks: tuple[TaskDemand, ...]
    vc: str = "default"
    user: str = ""
    gpu_type: str | None = None  # every GPU of the job is of this type; any when None
    topology: Topology = "pack"
    max_runtime_s: float | None = None  # the user's limit: the only run time a policy may know
    traceparent: str | None = None  # the submit's trace, continued by the decision's event
    attained_gpu_s: float = 0.0  # GPU-seconds its earlier attempts ran (Tiresias' attained service)
    waited_s: float = 0.0  # how long it has been pending, all its waits together
    generation: int = 0  # its placements so far (its next is generation + 1), as read
    # A service replica (kind: service): placed within its VC's quota only, never borrowing,
    # so that no owner's reclaim ever has to stop it (victims.py, planner.py).
    service: bool = False
    # A task names an image and the job does not allow host execution: placed only on nodes
    # that run images (``NodeCapacity.runs_images``; images.py).
    needs_image_runtime: bool = False
    # Derived once: the planner reads them a few hundred thousand times a cycle, and a
    # cached_property (a lock and a dict lookup per read) cost seconds there. ``gpus``
    # counts shares as fractions (quotas and fair share count what a job holds);
    # ``shares``: some instance asks for a share of a GPU rather than whole ones.
    gpus: float = field(init=False, repr=False, compare=False)
    widest: int = field(init=False, repr=False, compare=False)
    shares: bool = field(init=False, repr=False, compare=False)
    # What it asks for, as the planner groups jobs that fare alike, as one string: the
    # planner looks it up twice per waiting job per cycle, and a string's hash is worked
    # out once and kept, where a tuple's (or a frozen dataclass's) is recomputed each time.
    asks: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        shares = any(t.gpu_milli for t in self.tasks)
        whole = sum(t.instances * t.gpus for t in self.tasks)
        gpus = whole + sum(t.instances * t.gpu_milli for t in self.tasks) / 1000 if shares else whole
        object.__setattr__(self, "gpus", gpus)
        object.__setattr__(self, "widest", max((t.gpus for t in self.tasks), default=0))
        object.__setattr__(self, "shares", shares)
        tasks = tuple((t.role, t.instances, t.gpus, t.cpus, t.memory_mb, t.gpu_milli) for t in self.tasks)
        asks: tuple[object, ...] = (self.vc, tasks, self.gpu_type, self.topology, self.priority)
        if self.service:
            asks = (*asks, True)
        if self.needs_image_runtime:  # (only then: the asks of other jobs stay as they were)
            asks = (*asks, "image")
        object.__setattr__(self, "asks", repr(asks))

    def progressed(self, version: int, generation: int, attained_gpu_s: float, waited_s: float) -> PendingJob:
        """The same job as a later cycle reads it: only these four can have changed.

        A copy of the fields, not ``dataclasses.replace``: the live cycle does this for
        every pending job (thousands) every cycle, and running ``__init__`` and
        ``__post_init__`` again cost four times as much for fields that are the same."""
        job = object.__new__(PendingJob)
        job.__dict__.update(self.__dict__)
        job.__dict__.update(
            version=version, generation=generation, attained_gpu_s=attained_gpu_s, waited_s=waited_s
        )
        return job


@dataclass(slots=True)
class RunningJob:
    """A placed job (SCHEDULED or RUNNING) as the policy sees it.

    Read-only by convention, not ``frozen``: a cycle builds one per placed job (thousands)
    and a frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``,
    four times the cost of a slotted one."""

    job_id: str
    vc: str
    user: str
    priority: int
    gpu_type: str  # of the nodes it runs on ("" when it holds no GPU)
    slices: tuple[tuple[str, tuple[int, ...]], ...]  # (node, GPU indices) per task instance
    borrowed: bool = False  # placed beyond its VC's quota: reclaimable at any time
    runtime_s: float = 0.0  # since it was placed
    max_runtime_s: float | None = None
    preempting: bool = False  # a preemption was already asked for: its GPUs are coming free
    attained_gpu_s: float = 0.0  # GPU-seconds of all its runs, this one included
    waited_s: float = 0.0  # how long it was pending before this run, all its waits together
    promoted: bool = False  # placed by the starvation guard: never preempted for service
    service: bool = False  # a service replica: never a batch job's victim (victims.py)
    # Per slice, the share of its one GPU in thousandths (0: whole GPUs); empty when every
    # slice holds whole GPUs, as nearly all do.
    shares: tuple[int, ...] = ()
    # Per slice, the CPUs and memory (MiB) its task asked, and the GPU type the job asked
    # for (None: any); empty where not known (stranding.py then counts the queue alone).
    slice_asks: tuple[tuple[float, int], ...] = ()
    asked_type: str | None = None
    gpus: float = field(init=False, repr=False, compare=False)  # derived once, as PendingJob's

    def __post_init__(self) -> None:
        slices = self.slices
        if self.shares:
            self.gpus = sum(
                share / 1000 if share else len(gpus)
                for (_, gpus), share in zip(slices, self.shares, strict=True)
            )
        # Most jobs hold one slice; thousands are built per cycle.
        elif len(slices) == 1:
            self.gpus = len(slices[0][1])
        else:
            self.gpus = sum([len(gpus) for _, gpus in slices])


@dataclass(frozen=True)
class VirtualCluster:
    name: str
    quota: Mapping[str, int] = field(default_factory=dict)  # guaranteed GPUs per GPU type
    max_gpus_per_user: int | None = None


@dataclass(slots=True)
class NodeCapacity:
    node_id: str
    free_gpus: list[int]
    # Its usable GPUs, free or not (default: as many as are free).
    total_gpus: int = -1
    gpu_type: str = ""
    rack: str = ""  # its topology label: a multi-node gang stays in one rack when it fits
    # CPU cores and memory (MiB) left for tasks; None: the node reports none, no limit.
    free_cpus: float | None = None
    free_memory_mb: int | None = None
    # GPU index -> NVLink domain; a GPU missing here is in domain 0 (empty: one domain).
    domains: dict[int, int] = field(default_factory=dict)
    # Whether its GPUs may be shared (its pool's sharing mode is not ``none``), and, per GPU
    # that holds shares, the thousandths already taken. A GPU with shares is not free: whole-
    # GPU jobs never land on it.
    sharing: bool = False
    shares: dict[int, int] = field(default_factory=dict)
    # Whether it runs task images: a container runtime, or Kubernetes' pods.
    runs_images: bool = False

    def __post_init__(self) -> None:
        if self.total_gpus < 0:
            self.total_gpus = len(self.free_gpus)


@dataclass(frozen=True)
class InstancePlacement:
    role: str
    index: int
    node_id: str
    gpu_indices: tuple[int, ...]
    gpu_milli: int = 0  # a share of its one GPU, in thousandths (0: whole GPUs)


@dataclass
class Decision:
    job: PendingJob
    placements: list[InstancePlacement] = field(default_factory=list)
    borrowed: bool = False
    promoted: bool = False  # by the starvation guard (levels.py): kept with its allocation


@dataclass(frozen=True)
class Preemption:
    job_id: str
    reason: str
    for_job: str


@dataclass(slots=True)
class Waiting:
    """Why a job is still pending after a cycle (slotted, not frozen, for RunningJob's reason)."""

    job_id: str
    reason: PendingReason
    detail: str
    position: int  # 1-based, among the jobs left waiting, in the order the cycle took them
    estimated_start_s: float | None = None  # seconds from now; None when nothing says


@dataclass
class Plan:
    decisions: list[Decision] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)


# The live service's reservation delay (SchedulerSettings), which the simulator's ``live``
# policy uses too (its starvation limit is load-aware: starvation.py); PlanSettings' own
# defaults are the plain mechanisms (no guard, EASY reservations at once) that the
# planner's unit tests describe.
LIVE_RESERVE_AFTER_S = math.inf


@dataclass(frozen=True)
class PlanSettings:
    # A job runs at least this long before it may be preempted for priority (not for reclaim).
    min_runtime_s: float = 300.0
    # Preemption searches per cycle, and candidates looked at per search: each is cheap,
    # but a long queue of jobs that all need victims must not make one cycle slow.
    max_victim_searches: int = 32
    max_victims_examined: int = 256
    # Least attained service (duration-blind: what a job has run, never what it will): a
    # job's service level is how many of these GPU-second thresholds its attained service
    # has passed. Within a priority, lower levels go first, and a job may preempt jobs of
    # its VC (or borrowed ones) at a higher level once they ran ``min_runtime_s``. The
    # ladder: x4 from 900 GPU-s (15 min on one GPU; why these: docs/performance.md).
    service_thresholds_gpu_s: tuple[float, ...] = (900.0, 3600.0, 14400.0, 57600.0, 230400.0)
    preempt_for_service: bool = True
    # Moves (moves.py): a job that the free GPUs could hold, but no one node's, has small
    # borrowed jobs moved off the node closest to having room, when the other nodes' free
    # GPUs can take them.
    move_to_defragment: bool = True
    # The first job that waits for capacity holds a reservation (EASY backfill) only once
    # it has waited this long; before, jobs behind it that fit go ahead (Tiresias skips a
    # job that does not fit). 0: at once. Without run-time limits nothing can backfill a
    # reservation, so an early one blocks the queue behind every wide job.
    reserve_after_s: float = 0.0
    # Starvation guard (levels.py): a job pending this long (all its waits) may be
    # promoted: it then ranks before every job of its priority, may preempt any of them
    # that is not itself promoted, and once placed is never preempted for service (its
    # allocation says it was promoted): least attained service alone starves long jobs.
    # Longest wait first, while promoted jobs, placed or not, hold at most
    # ``starve_budget_share`` of the cluster's GPUs; jobs wider than ``starve_max_share``
    # of them are never promoted (a promoted gang holding half a small cluster for days
    # costs everyone else more).
    starve_after_s: float = math.inf
    starve_max_share: float = 0.25
    starve_budget_share: float = 0.5

    def promotable(self, waited_s: float, gpus: float, cluster_gpus: int) -> bool:
        return waited_s >= self.starve_after_s and gpus <= self.starve_max_share * cluster_gpus

    def service_level(self, attained_gpu_s: float) -> int:
        return bisect.bisect_right(self.service_thresholds_gpu_s, attained_gpu_s)
