"""Placement policy: plain code over an in-memory snapshot, no I/O.

This is the foundation's policy — the simplest that is correct: jobs in priority then
submission order; each job is placed as a whole gang or not at all; each task instance
goes to the ready node with the fewest free GPUs that still fits it (best fit, which
packs jobs together and keeps whole nodes free for big ones), taking the lowest free
GPU indices. A job that does not fit now is skipped, so it cannot block smaller jobs
behind it. (The scheduler issue replaces this with quotas, fair share, backfill with
reservations, topology and preemption; the interface stays.)

Every job left waiting gets one reason from a closed set (``why_waiting``), its position
in the queue as the cycle considered it, and a sentence a user can act on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

PendingReason = Literal["InsufficientGPUs", "GangDoesNotFit", "Fragmented", "NodesUnhealthy", "Priority"]


@dataclass(frozen=True)
class TaskDemand:
    role: str
    instances: int
    gpus: int


@dataclass(frozen=True)
class PendingJob:
    job_id: str
    version: int
    priority: int
    tasks: tuple[TaskDemand, ...]


@dataclass
class NodeCapacity:
    node_id: str
    free_gpus: list[int]
    # Tasks placed on the node (GPU-less tasks still count, to spread them).
    load: int = 0
    # Its usable GPUs, free or not (default: as many as are free).
    total_gpus: int = -1

    def __post_init__(self) -> None:
        if self.total_gpus < 0:
            self.total_gpus = len(self.free_gpus)


@dataclass(frozen=True)
class InstancePlacement:
    role: str
    index: int
    node_id: str
    gpu_indices: tuple[int, ...]


@dataclass
class Decision:
    job: PendingJob
    placements: list[InstancePlacement] = field(default_factory=list)


def place_gang(job: PendingJob, nodes: dict[str, NodeCapacity]) -> list[InstancePlacement] | None:
    """Place every instance of ``job`` or nothing; mutates ``nodes`` only on success."""
    free = {node_id: list(node.free_gpus) for node_id, node in nodes.items()}
    load = {node_id: node.load for node_id, node in nodes.items()}
    placements: list[InstancePlacement] = []
    instances = [(t.role, i, t.gpus) for t in job.tasks for i in range(t.instances)]
    # Biggest instances first: they have the fewest places to go.
    for role, index, gpus in sorted(instances, key=lambda item: -item[2]):
        candidates = [n for n, gpu_list in free.items() if len(gpu_list) >= gpus]
        if not candidates:
            return None
        best = min(candidates, key=lambda n: (len(free[n]) if gpus else load[n], n))
        taken = tuple(free[best][:gpus])
        free[best] = free[best][gpus:]
        load[best] += 1
        placements.append(InstancePlacement(role, index, best, taken))
    for node_id, node in nodes.items():
        node.free_gpus = free[node_id]
        node.load = load[node_id]
    placements.sort(key=lambda p: (p.role, p.index))
    return placements


@dataclass(frozen=True)
class Waiting:
    """Why a job is still pending after a cycle."""

    job_id: str
    reason: PendingReason
    detail: str
    position: int  # 1-based, among the jobs left waiting, in the order the cycle took them


@dataclass
class Plan:
    decisions: list[Decision] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)


def plan(pending: list[PendingJob], nodes: dict[str, NodeCapacity], largest_unready_node: int = 0) -> Plan:
    """Place what fits, in priority then submission order, and say why the rest waits.
    ``largest_unready_node``: the most GPUs on a registered node that is drained or
    unreachable (a job only it could hold waits for the node, not for the queue)."""
    result = Plan()
    free_at_start = sum(len(n.free_gpus) for n in nodes.values())
    free_now = free_at_start
    largest_ready = max((n.total_gpus for n in nodes.values()), default=0)
    for job in sorted(pending, key=lambda j: -j.priority):  # stable: keeps submit order
        placements = place_gang(job, nodes)
        if placements is not None:
            result.decisions.append(Decision(job, placements))
            free_now -= sum(len(p.gpu_indices) for p in placements)
            continue
        reason, detail = why_waiting(job, free_now, free_at_start, largest_ready, largest_unready_node)
        result.waiting.append(Waiting(job.job_id, reason, detail, len(result.waiting) + 1))
    return result


def decide(pending: list[PendingJob], nodes: dict[str, NodeCapacity]) -> list[Decision]:
    return plan(pending, nodes).decisions


def why_waiting(
    job: PendingJob, free_now: int, free_at_start: int, largest_ready: int, largest_unready: int
) -> tuple[PendingReason, str]:
    """The one reason a job that did not fit waits, and a sentence that says it."""
    need = sum(t.instances * t.gpus for t in job.tasks)
    widest = max((t.gpus for t in job.tasks), default=0)
    shape = " + ".join(f"{t.instances}x{t.gpus}" for t in job.tasks if t.gpus)
    if widest > largest_ready:
        if widest <= largest_unready:
            return "NodesUnhealthy", (
                f"a task needs {widest} GPUs on one node; only nodes that are drained or unreachable"
                f" have that many (the largest ready node has {largest_ready})"
            )
        return "GangDoesNotFit", (
            f"a task needs {widest} GPUs on one node; the largest ready node has {largest_ready}"
        )
    if need > free_now:
        if need <= free_at_start:
            return "Priority", (
                f"needs {need} GPUs; jobs ahead of it in the queue took them ({free_now} left free)"
            )
        return "InsufficientGPUs", f"needs {need} GPUs; {free_now} are free on ready nodes"
    return "Fragmented", (
        f"needs {need} GPUs as {shape} and {free_now} are free, but spread so that the gang does not"
        f" fit (a task needs {widest} on one node)"
    )
