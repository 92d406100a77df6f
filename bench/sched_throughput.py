"""How fast the live scheduling policy decides: placements per second on a big cluster.

    python -m bench.sched_throughput --nodes 5000 --gpus-per-node 8 --jobs 50000

Runs the scheduler's own cycle code (``services/scheduler/planner.py``: quotas, borrowing
and reclaim, fair share, gangs, backfill reservations, reasons and estimates for every
waiting job) in one process, on one core, over a simulated clock:

- a cluster of ``--nodes`` nodes of ``--gpus-per-node`` H100s; four VCs whose quotas
  promise 80 % of it (a fifth, ``default``, has none: its jobs only borrow);
- ``--jobs`` jobs submitted at once, gangs of 1-64 GPUs (1, 2, 4, 8 GPUs on one node; 16,
  32, 64 as 8-GPU instances), 100 users, a few high-priority jobs, half with a
  ``max_runtime_s``; run times exponential, mean one hour;
- ``--fractional F``: that share of the jobs asks for a fraction of one GPU instead (the
  shares the Alibaba GPU-sharing trace asks most: 0.81, 0.47, 0.32, 0.65, ...), and every
  node shares its GPUs;
- ``--cpus-per-gpu C``: every node reports C CPUs per GPU, and every task asks for CPUs
  beside its GPUs (half, once or one and a half times C per GPU, at most a node's; a share
  its part of C),
  so that placement weighs what it strands (``services/scheduler/stranding.py``);
- every cycle, like the live service's: jobs that ended give their GPUs back, a fresh
  snapshot of every node is built (as ``snapshot.load_snapshot`` builds it from its
  rows), the first 5,000 pending jobs are planned (the live cycle's limit), and the
  decisions are applied (preempted jobs go back to the queue). Between cycles the clock
  moves 300 simulated seconds.

A cycle's time is the snapshot (nodes and running jobs) plus the plan: what the live cycle spends outside
Postgres. The reads and the one commit per cycle come on top (measured by ``bench.e2e``
on the whole stack). ``placements_per_s`` = placements / total cycle time; the cycle
percentiles are over every cycle that had pending jobs. The process's garbage collector
is set up as the scheduler's is (``shared/gc_tuning.py``). ``--clock cpu`` times cycles
in this process's CPU time instead of wall time: the figure to compare on a shared
machine, where another tenant's load shows in wall time.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from services.scheduler.cycle import MAX_PENDING_PER_CYCLE
from services.scheduler.model import (
    NodeCapacity,
    PendingJob,
    RunningJob,
    TaskDemand,
    VirtualCluster,
    task_demand,
)
from services.scheduler.planner import PlanSettings, plan
from shared.gc_tuning import tune_garbage_collector

GANG_SIZES = (1, 2, 4, 8, 16, 32, 64)
GANG_WEIGHTS = (40, 15, 15, 15, 8, 5, 2)
# The commonest shares of the Alibaba GPU-sharing trace's fractional pods, by how many ask.
SHARES = (0.81, 0.47, 0.32, 0.65, 0.25, 0.5)
SHARE_WEIGHTS = (1078, 750, 328, 253, 200, 200)
VC_SHARES = {"vision": 0.3, "speech": 0.2, "nlp": 0.2, "research": 0.1}  # of the cluster's GPUs
VC_WEIGHTS = {"vision": 30, "speech": 20, "nlp": 20, "research": 15, "default": 15}


@dataclass
class Workload:
    jobs: list[PendingJob]
    duration_s: dict[str, float]
    vcs: dict[str, VirtualCluster]


def make_workload(
    jobs: int,
    total_gpus: int,
    seed: int,
    fractional: float = 0.0,
    cpus_per_gpu: float = 0.0,
    gpus_per_node: int = 8,
) -> Workload:
    rng = random.Random(seed)
    cpu_rng = random.Random(seed + 1)  # apart, so that the jobs are the same whatever the CPUs
    vcs = {name: VirtualCluster(name, {"H100": int(total_gpus * share)}) for name, share in VC_SHARES.items()}
    vcs["default"] = VirtualCluster("default")
    names = list(VC_WEIGHTS)
    weights = list(VC_WEIGHTS.values())
    pending = []
    duration = {}
    for n in range(jobs):
        gpus = rng.choices(GANG_SIZES, GANG_WEIGHTS)[0]
        task = TaskDemand("worker", gpus // 8, 8) if gpus > 8 else TaskDemand("main", 1, gpus)
        if fractional and rng.random() < fractional:
            task = task_demand("main", 1, rng.choices(SHARES, SHARE_WEIGHTS)[0])
        if cpus_per_gpu:
            per_gpu = cpus_per_gpu * cpu_rng.choice((0.5, 1.0, 1.5))
            gpus_each = task.gpus or task.gpu_milli / 1000
            # At most a node's: a task that asked more would wait for ever.
            task = replace(task, cpus=min(gpus_per_node * cpus_per_gpu, max(1.0, round(per_gpu * gpus_each))))
        run_s = rng.expovariate(1 / 3600)
        job_id = f"job-{n:06d}"
        pending.append(
            PendingJob(
                job_id,
                1,
                priority=10 if rng.random() < 0.05 else 0,
                tasks=(task,),
                vc=rng.choices(names, weights)[0],
                user=f"user-{rng.randrange(100)}",
                max_runtime_s=run_s * rng.uniform(1.0, 3.0) if rng.random() < 0.5 else None,
            )
        )
        duration[job_id] = run_s
    return Workload(pending, duration, vcs)


def _release(
    job: RunningJob, free: dict[str, set[int]], shared: dict[str, dict[int, int]], cpus_used: dict[str, float]
) -> None:
    """A job's GPUs come back: whole ones at once, a shared one when its last share leaves;
    and its CPUs."""
    for (node_id, _), (cpus, _) in zip(job.slices, job.slice_asks, strict=True):
        cpus_used[node_id] -= cpus
    for (node_id, gpus), milli in zip(job.slices, job.shares or (0,) * len(job.slices), strict=True):
        if not milli:
            free[node_id].update(gpus)
            continue
        left = shared[node_id][gpus[0]] - milli
        if left:
            shared[node_id][gpus[0]] = left
        else:
            del shared[node_id][gpus[0]]
            free[node_id].add(gpus[0])


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, round((len(ordered) - 1) * q / 100))]


def run(
    nodes: int,
    gpus_per_node: int,
    jobs: int,
    seed: int,
    tick_s: float = 300.0,
    max_cycles: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
    fractional: float = 0.0,
    cpus_per_gpu: float = 0.0,
) -> dict[str, object]:
    workload = make_workload(jobs, nodes * gpus_per_node, seed, fractional, cpus_per_gpu, gpus_per_node)
    free = {f"node-{i:05d}": set(range(gpus_per_node)) for i in range(nodes)}
    cpus_used = dict.fromkeys(free, 0.0)
    node_cpus = gpus_per_node * cpus_per_gpu
    shared: dict[str, dict[int, int]] = {node_id: {} for node_id in free}  # GPU -> thousandths held
    pending = list(workload.jobs)  # submission order
    order = {job.job_id: n for n, job in enumerate(workload.jobs)}
    by_id = {job.job_id: job for job in workload.jobs}
    running: dict[str, RunningJob] = {}
    started_at: dict[str, float] = {}
    ends: list[tuple[float, str]] = []
    settings = PlanSettings(min_runtime_s=300)
    now = 0.0
    cycle_s: list[float] = []
    placements = preemptions = 0
    while pending and (max_cycles is None or len(cycle_s) < max_cycles):
        while ends and ends[0][0] <= now:
            _, job_id = heapq.heappop(ends)
            if job_id in running:
                _release(running.pop(job_id), free, shared, cpus_used)
        began = clock()
        # As the live cycle builds them from its rows: a fresh record per placed job.
        snapshot_running = [
            RunningJob(r.job_id, r.vc, r.user, r.priority, r.gpu_type, r.slices, r.borrowed,
                       now - started_at[r.job_id], r.max_runtime_s, preempting=False, shares=r.shares,
                       slice_asks=r.slice_asks)
            for r in running.values()
        ]  # fmt: skip
        snapshot = [
            NodeCapacity(
                node_id,
                sorted(gpus),
                total_gpus=gpus_per_node,
                gpu_type="H100",
                sharing=fractional > 0,
                shares=dict(shared[node_id]),
                free_cpus=node_cpus - cpus_used[node_id] if node_cpus else None,
            )
            for node_id, gpus in free.items()
        ]
        result = plan(
            pending[:MAX_PENDING_PER_CYCLE],
            snapshot,
            running=snapshot_running,
            vcs=workload.vcs,
            settings=settings,
        )
        cycle_s.append(clock() - began)
        placed = set()
        for decision in result.decisions:
            job = decision.job
            slices = tuple((p.node_id, p.gpu_indices) for p in decision.placements)
            shares = tuple(p.gpu_milli for p in decision.placements) if job.shares else ()
            asks = {task.role: task.cpus for task in job.tasks}
            slice_asks = tuple((asks[p.role], 0) for p in decision.placements)
            for p in decision.placements:
                cpus_used[p.node_id] += asks[p.role]
            for (node_id, gpus), milli in zip(slices, shares or (0,) * len(slices), strict=True):
                free[node_id].difference_update(gpus)
                if milli:
                    shared[node_id][gpus[0]] = shared[node_id].get(gpus[0], 0) + milli
            running[job.job_id] = RunningJob(
                job.job_id, job.vc, job.user, job.priority, "H100", slices, decision.borrowed,
                max_runtime_s=job.max_runtime_s, shares=shares, slice_asks=slice_asks,
            )  # fmt: skip
            started_at[job.job_id] = now
            heapq.heappush(ends, (now + workload.duration_s[job.job_id], job.job_id))
            placed.add(job.job_id)
        placements += len(placed)
        returned = []
        for preemption in result.preemptions:
            victim = running.pop(preemption.job_id, None)
            if victim is None:
                continue
            preemptions += 1
            _release(victim, free, shared, cpus_used)
            returned.append(by_id[victim.job_id])
        pending = [job for job in pending if job.job_id not in placed]
        if returned:
            pending = sorted(pending + returned, key=lambda job: order[job.job_id])
        now += tick_s
    total = sum(cycle_s)
    return {
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "jobs": jobs,
        "fractional": fractional,
        "cpus_per_gpu": cpus_per_gpu,
        "cycles": len(cycle_s),
        "placements": placements,
        "preemptions": preemptions,
        "placements_per_s": round(placements / total, 1) if total else 0.0,
        "cycle_p50_ms": round(percentile(cycle_s, 50) * 1000, 2),
        "cycle_p99_ms": round(percentile(cycle_s, 99) * 1000, 2),
        "cycle_max_ms": round(max(cycle_s) * 1000, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "simulated_s": now,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sched_throughput", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--fractional", type=float, default=0.0, help="share of jobs asking for a fraction of one GPU (0-1)"
    )
    parser.add_argument(
        "--cpus-per-gpu", type=float, default=0.0, help="CPUs per GPU nodes report and tasks ask (0: none)"
    )
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="time cycles in wall or in CPU time"
    )
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.jobs < 1 or args.gpus_per_node < 8:
        parser.error("--nodes and --jobs must be at least 1, --gpus-per-node at least 8 (gangs of 8)")
    tune_garbage_collector()  # as the scheduler process runs
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if not 0 <= args.fractional <= 1:
        parser.error("--fractional is a share of the jobs, from 0 to 1")
    if args.cpus_per_gpu < 0:
        parser.error("--cpus-per-gpu must be 0 (nodes report no CPUs) or more")
    result = run(
        args.nodes, args.gpus_per_node, args.jobs, args.seed, clock=clock, fractional=args.fractional,
        cpus_per_gpu=args.cpus_per_gpu,
    )  # fmt: skip
    print(json.dumps({**result, "clock": args.clock}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
