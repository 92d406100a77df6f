"""Replay the Alibaba GPU-sharing trace under each policy; print one JSON line of results, last.

    python -m bench.packing                    # 10 seeds, default list and the gpushare lists
    python -m bench.packing --quick --seeds 3  # default list only

Per policy, means over the seeds (0 .. N-1): ``gpu_allocation_ratio`` (GPU thousandths held
by placed pods / the cluster's, once the arrived request reached ``--load`` x its GPUs),
``unallocated_gpus`` = cluster GPUs x (1 - ratio), ``dropped_pods`` (fitted nowhere when
they arrived). The top-level ``gpu_allocation_ratio`` and ``unallocated_gpus`` are Corral's
on the default list. ``published`` are the paper simulator's cached means for the same list
and load (hkust-adsl/kubernetes-scheduler-simulator,
``experiments/analysis/expected_results/analysis_allo_discrete.csv`` @ 1853fc0, 10 seeds).

Policies: ``fgd``, ``best_fit``, ``dot_product``, ``corral`` (the default set), and
``fgd_exact`` and ``corral_whole`` (no sharing: every share rounded up to a GPU) on request
(``replay.EXTRA_POLICIES``). Work is split over ``--jobs`` processes, one (list, policy) at
a time, all its seeds together, so that FGD's memo serves every seed of a list.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench.packing.replay import EXTRA_POLICIES, POLICIES, Outcome, run, summarize
from bench.packing.trace import NODES_FILE, PODS_FILE, VARIANTS, TraceError, load_nodes, load_pods

DEFAULT_LIST = "default"
# The simulator's cached means at 130 % load (the file named in the module docstring).
PUBLISHED: dict[str, dict[str, float]] = {
    DEFAULT_LIST: {"fgd": 0.9539, "best_fit": 0.9308, "dot_product": 0.9085},
    "gpushare40": {"fgd": 0.9415, "best_fit": 0.9169, "dot_product": 0.8956},
    "gpushare60": {"fgd": 0.9140, "best_fit": 0.8936, "dot_product": 0.8711},
    "gpushare80": {"fgd": 0.8931, "best_fit": 0.8701, "dot_product": 0.8449},
    "gpushare100": {"fgd": 0.8690, "best_fit": 0.8501, "dot_product": 0.8242},
}


def _unit(
    nodes_file: Path, pods_file: Path, policy: str, seeds: Sequence[int], load: float
) -> tuple[Path, str, list[Outcome]]:
    """One (list, policy) over every seed: what a worker process runs."""
    outcomes = run([policy], load_nodes(nodes_file), load_pods(pods_file), seeds, load)
    return pods_file, policy, outcomes[policy]


def _run_all(
    lists: dict[str, Path], nodes_file: Path, policies: list[str], seeds: list[int], load: float, jobs: int
) -> dict[str, dict[str, dict[str, float]]]:
    # The slowest first, so that the last unit to finish is a short one.
    slowest = ("fgd", "fgd_exact", "corral", "corral_whole", "best_fit", "dot_product")
    ordered = sorted(policies, key=slowest.index)
    units = [(nodes_file, path, policy, seeds, load) for policy in ordered for path in lists.values()]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            done = list(pool.map(_unit, *zip(*units, strict=True)))
    else:
        done = [_unit(*unit) for unit in units]
    summaries = {(path, policy): summarize(outcomes) for path, policy, outcomes in done}
    return {name: {policy: summaries[(path, policy)] for policy in policies} for name, path in lists.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.packing", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="replay seeds 0 .. N-1 (default 10)")
    parser.add_argument("--load", type=float, default=1.3, help="arrived GPU request / cluster GPUs")
    parser.add_argument("--pods-file", type=Path, default=PODS_FILE)
    parser.add_argument("--nodes-file", type=Path, default=NODES_FILE)
    parser.add_argument(
        "--policies", default=",".join(POLICIES), help=f"comma-separated, of {POLICIES + EXTRA_POLICIES}"
    )
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated gpushare lists, or 'none'"
    )
    parser.add_argument("--quick", action="store_true", help="the default list only (no variants)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    args = parser.parse_args(argv)
    policies = [p for p in args.policies.split(",") if p]
    variants = [] if args.quick or args.variants == "none" else [v for v in args.variants.split(",") if v]
    if unknown := set(policies) - set(POLICIES + EXTRA_POLICIES):
        parser.error(f"unknown policies {sorted(unknown)}: choose from {POLICIES + EXTRA_POLICIES}")
    if unknown := set(variants) - set(VARIANTS):
        parser.error(f"unknown variants {sorted(unknown)}: choose from {tuple(VARIANTS)}")
    if not policies or args.seeds < 1 or args.load <= 0 or args.jobs < 1:
        parser.error("--policies must name one, --seeds and --jobs be at least 1, --load above 0")
    started = time.perf_counter()
    try:
        nodes = load_nodes(args.nodes_file)
        load_pods(args.pods_file)  # a malformed list is reported before any work starts
    except TraceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    lists = {DEFAULT_LIST: args.pods_file, **{name: VARIANTS[name] for name in variants}}
    results = _run_all(lists, args.nodes_file, policies, list(range(args.seeds)), args.load, args.jobs)
    default_list = args.pods_file.resolve() == PODS_FILE.resolve()
    # The published means are for the trace's nodes at 130 % load: comparable only then.
    comparable = args.nodes_file.resolve() == NODES_FILE.resolve() and args.load == 1.3
    report: dict[str, Any] = {}
    if "corral" in policies and default_list:
        corral = results[DEFAULT_LIST]["corral"]
        report.update(
            gpu_allocation_ratio=corral["gpu_allocation_ratio"], unallocated_gpus=corral["unallocated_gpus"]
        )
    report.update(
        pods_file=args.pods_file.name,
        nodes=len(nodes),
        total_gpus=sum(node.gpus for node in nodes),
        seeds=args.seeds,
        load=args.load,
        policies=results[DEFAULT_LIST],
    )
    if default_list and comparable:
        report["published"] = PUBLISHED[DEFAULT_LIST]
    report["variants"] = {
        name: {"policies": results[name]}
        | ({"published": PUBLISHED[name]} if comparable and name in PUBLISHED else {})
        for name in variants
    }
    report["wall_s"] = round(time.perf_counter() - started, 2)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
