"""The packing baselines of the FGD paper, as its simulator scores them.

Read from hkust-adsl/kubernetes-scheduler-simulator (``pkg/simulator/plugin/``), the
configuration of its artifact runs (``BestFit``; ``DotProd`` with ``-gpusel best -dimext
merge -norm max``):

- **best_fit** (``best_fit_score.go``): a node's leftover after the pod, CPU and GPU each
  over the largest node's (128 cores, 8 GPUs), weighted half and half; the least leftover
  wins. The GPU side is the node's total thousandths left, shares included. Score
  ``int(100 * (1 - leftover))``.
- **dot_product** (``dot_product_score.go``, Tetris' alignment): the dot product of the
  node's free (CPU, total GPU thousandths) and the pod's request, both over the same
  maxima, halved; the *smallest* product wins (the simulator scores ``1 - product``), i.e.
  the node with the least free capacity along the pod's request: packing.
- Both put a share on the GPU of the node with the least left that still holds it (first
  index on ties), whole GPUs on the lowest-indexed free ones (``-gpusel best``).

Scores are integers 0-100, as the scheduler framework takes them, and equal scores go to the
node first in an order drawn once per replay (``select_host``): with this rounding many
nodes tie, which is part of how these baselines behave in the paper's numbers.
"""

from __future__ import annotations

import numpy as np

from bench.packing.cluster import Cluster, Ints, Placement, select_host
from bench.packing.trace import GPU_MILLI, Pod

MAX_SPEC_CPU = 128_000.0  # milli-cores of the largest node the simulator normalises by
MAX_SPEC_GPU = 8.0 * GPU_MILLI


def gpus_best_fit(cluster: Cluster, row: int, pod: Pod) -> tuple[int, ...]:
    if pod.fractional:
        return (cluster.tightest_share(row, pod.gpu_milli),)
    return cluster.lowest_whole(row, pod.num_gpu)


def best_fit(cluster: Cluster, pod: Pod, tie_rank: Ints) -> Placement | None:
    rows = cluster.feasible(pod)
    if not rows.size:
        return None
    cpu = (cluster.cpu_left[rows] - pod.cpu_milli) / MAX_SPEC_CPU * 0.5
    gpu = (cluster.gpu_left_total[rows] - pod.gpu_request) / MAX_SPEC_GPU * 0.5
    row = select_host(rows, np.trunc((1.0 - (cpu + gpu)) * 100.0), tie_rank)
    return Placement(row, gpus_best_fit(cluster, row, pod))


def dot_product(cluster: Cluster, pod: Pod, tie_rank: Ints) -> Placement | None:
    rows = cluster.feasible(pod)
    if not rows.size:
        return None
    product = (cluster.cpu_left[rows] / MAX_SPEC_CPU) * (pod.cpu_milli / MAX_SPEC_CPU) + (
        cluster.gpu_left_total[rows] / MAX_SPEC_GPU
    ) * (pod.gpu_request / MAX_SPEC_GPU)
    row = select_host(rows, np.trunc(100.0 * (1.0 - product / 2.0)), tie_rank)
    return Placement(row, gpus_best_fit(cluster, row, pod))
