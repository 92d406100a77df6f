"""Replay a job trace on a simulated cluster under one policy; print one JSON line of results.

    python -m bench.simulate --trace ../shared/traces/bench_itp_cluster06.csv \\
        --nodes 16 --gpus-per-node 8 --policy corral

Policies: fifo, fifo_bf, sjf, sjf_skip, srtf, las, corral (bench/sim/policy/). The
simulation itself is bench/sim/engine.py, whose docstring lists its assumptions.

Metrics, over the jobs replayed (jobs wider than the cluster are skipped and counted):

- `*_jct_s`: job completion time, finish - submit;
- `*_queue_s`: time a job spent not running (before its first start and after every
  preemption), JCT - time holding GPUs;
- percentiles interpolate linearly between the two nearest ranks;
- `makespan_s`: last finish - first submission;
- `gpu_utilization`: GPU-seconds held by jobs / (cluster GPUs x makespan);
- `preemptions`: total over all jobs; `wall_s`: real seconds for load + replay.

A malformed trace is reported on stderr with its line number, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.sim.engine import Outcome, SimulationStuck, simulate
from bench.sim.policy import POLICIES
from bench.sim.traces import TraceError, load_trace


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of already sorted values, linearly interpolated."""
    if not sorted_values:
        return 0.0
    rank = (len(sorted_values) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def summarize(outcome: Outcome) -> dict[str, Any]:
    done = outcome.finished
    jct = sorted(f.jct_s for f in done)
    queue = sorted(f.queue_s for f in done)
    makespan = max(f.finish_s for f in done) - min(f.submit_s for f in done) if done else 0.0
    busy = sum(f.gpus * f.executed_s for f in done)
    return {
        "jobs": len(done),
        "skipped_too_big": outcome.skipped_too_big,
        "avg_jct_s": round(sum(jct) / len(jct), 3) if jct else 0.0,
        "p50_jct_s": round(percentile(jct, 50), 3),
        "p99_jct_s": round(percentile(jct, 99), 3),
        "avg_queue_s": round(sum(queue) / len(queue), 3) if queue else 0.0,
        "p99_queue_s": round(percentile(queue, 99), 3),
        "p999_queue_s": round(percentile(queue, 99.9), 3),
        "makespan_s": round(makespan, 3),
        "gpu_utilization": round(busy / (outcome.total_gpus * makespan), 4) if makespan else 0.0,
        "preemptions": sum(f.preemptions for f in done),
        "rounds": outcome.rounds,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.simulate", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--trace", type=Path, required=True, help="CSV: job_id,submit_time_s,gpus,duration_s,vc"
    )
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--policy", choices=POLICIES, required=True)
    parser.add_argument(
        "--restart-overhead-s",
        type=float,
        default=0.0,
        help="extra run time charged to a preempted job each time it restarts (default 0)",
    )
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.gpus_per_node < 1:
        parser.error("--nodes and --gpus-per-node must be at least 1")
    if args.restart_overhead_s < 0:
        parser.error("--restart-overhead-s must be ≥ 0")
    started = time.perf_counter()
    try:
        trace = load_trace(args.trace)
    except TraceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        outcome = simulate(trace, args.policy, args.nodes, args.gpus_per_node, args.restart_overhead_s)
    except SimulationStuck as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    result = {"policy": args.policy, "trace": args.trace.name, **summarize(outcome)}
    result["wall_s"] = round(time.perf_counter() - started, 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
