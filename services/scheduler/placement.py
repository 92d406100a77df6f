"""Placement policy: plain code over an in-memory snapshot, no I/O.

This is the foundation's policy — the simplest that is correct: jobs in priority then
submission order; each job is placed as a whole gang or not at all; each task instance
goes to the ready node with the fewest free GPUs that still fits it (best fit, which
packs jobs together and keeps whole nodes free for big ones), taking the lowest free
GPU indices. A job that does not fit now is skipped, so it cannot block smaller jobs
behind it. (The scheduler issue replaces this with quotas, fair share, backfill with
reservations, topology and preemption; the interface stays.)
"""

from __future__ import annotations

from dataclasses import dataclass, field


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


def decide(pending: list[PendingJob], nodes: dict[str, NodeCapacity]) -> list[Decision]:
    decisions = []
    for job in sorted(pending, key=lambda j: -j.priority):  # stable: keeps submit order
        placements = place_gang(job, nodes)
        if placements is not None:
            decisions.append(Decision(job, placements))
    return decisions
