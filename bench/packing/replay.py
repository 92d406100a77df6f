"""One replay: pods arrive one at a time and stay (no departures); a policy places each or
it is dropped. Then the same over seeds and policies, as means.

Every policy sees the same arrivals for a seed (``trace.arrivals``) and breaks ties in the
same order of nodes, drawn from the seed (``cluster.select_host``), so the policies are
compared on identical pod sequences.
The allocation is the replay's ledger (``Cluster``): GPU thousandths held by placed pods over
the cluster's, at the end, when the arrived request has reached the load.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from bench.packing.baselines import best_fit, dot_product
from bench.packing.cluster import Cluster, Ints, Placement
from bench.packing.corral import CorralLive
from bench.packing.fragmentation import Fgd, FragmentationMemo, workload_mix
from bench.packing.trace import GPU_MILLI, Node, Pod, arrivals

Policy = Callable[[Cluster, Pod, Ints], Placement | None]
POLICIES = ("fgd", "best_fit", "dot_product", "corral")
# FGD ranking by the exact gain (no 0-100 rounding); the live code with every share rounded
# up to a whole GPU (what sharing gains).
EXTRA_POLICIES = ("fgd_exact", "corral_whole")


def make_policy(name: str, nodes: list[Node], memo: FragmentationMemo) -> Policy:
    """A fresh policy for one replay (Corral's keeps an index of the replay's nodes)."""
    if name == "fgd":
        return Fgd(memo)
    if name == "fgd_exact":
        return Fgd(memo, exact=True)
    if name == "best_fit":
        return best_fit
    if name == "dot_product":
        return dot_product
    if name == "corral":
        return CorralLive(nodes)
    if name == "corral_whole":
        return CorralLive(nodes, whole=True)
    raise ValueError(f"unknown policy {name!r}: choose from {', '.join(POLICIES + EXTRA_POLICIES)}")


@dataclass(frozen=True)
class Outcome:
    policy: str
    seed: int
    arrived_pods: int
    arrived_gpu_milli: int
    dropped_pods: int
    allocated_gpu_milli: int
    total_gpu_milli: int
    wall_s: float

    @property
    def ratio(self) -> float:
        return self.allocated_gpu_milli / self.total_gpu_milli


def replay(policy: Policy, nodes: list[Node], pods: Sequence[Pod], seed: int) -> Cluster:
    """Place ``pods`` in order with ``policy``; the cluster as they left it."""
    cluster = Cluster(nodes)
    tie_rank = np.random.default_rng(seed).permutation(len(nodes)).astype(np.int64)
    for pod in pods:
        placement = policy(cluster, pod, tie_rank)
        if placement is None:
            cluster.dropped += 1
        else:
            cluster.place(pod, placement)  # raises if the policy over-commits
    return cluster


def run(
    names: Sequence[str], nodes: list[Node], pods: list[Pod], seeds: Sequence[int], load: float
) -> dict[str, list[Outcome]]:
    """Every policy over every seed, on the arrivals the seed draws from ``pods``."""
    memo = FragmentationMemo(workload_mix(pods))
    total_gpus = sum(node.gpus for node in nodes)
    outcomes: dict[str, list[Outcome]] = {name: [] for name in names}
    for seed in seeds:
        arrived = arrivals(pods, total_gpus, load, seed)
        for name in names:
            began = time.perf_counter()
            cluster = replay(make_policy(name, nodes, memo), nodes, arrived, seed)
            outcomes[name].append(
                Outcome(
                    policy=name,
                    seed=seed,
                    arrived_pods=len(arrived),
                    arrived_gpu_milli=sum(pod.gpu_request for pod in arrived),
                    dropped_pods=cluster.dropped,
                    allocated_gpu_milli=cluster.allocated_gpu_milli,
                    total_gpu_milli=cluster.total_gpu_milli,
                    wall_s=time.perf_counter() - began,
                )
            )
    return outcomes


def summarize(outcomes: Sequence[Outcome]) -> dict[str, float]:
    """Means over seeds; ``unallocated_gpus`` = cluster GPUs x (1 - mean ratio)."""
    count = len(outcomes)
    ratio = sum(o.ratio for o in outcomes) / count
    total = outcomes[0].total_gpu_milli
    return {
        "gpu_allocation_ratio": round(ratio, 4),
        "unallocated_gpus": round(total / GPU_MILLI * (1 - ratio), 1),
        "dropped_pods": round(sum(o.dropped_pods for o in outcomes) / count, 1),
        "arrived_pods": round(sum(o.arrived_pods for o in outcomes) / count, 1),
        "arrived_load": round(sum(o.arrived_gpu_milli for o in outcomes) / count / total, 4),
        "wall_s": round(sum(o.wall_s for o in outcomes), 2),
    }
