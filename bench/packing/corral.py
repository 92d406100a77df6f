"""Corral's live placement (``services/scheduler/placement.py``) driven pod by pod.

One ``NodeIndex`` is built for the replay and kept, as the planner keeps it through a cycle:
each node a sharing node (its pool shares GPUs) of its model, with its CPU cores and memory;
each pod a one-instance job of one task. Per pod the GPU models are tried as the planner
tries a job that names no type (``placement.type_order``: where it fits best first), and the
first ``place_gang`` that places it wins; ``place_gang`` updates the index itself. The
workload mix the live code weighs stranding against is built as the planner builds it, from
the asks still waiting (``CorralLive``).

What the live code chose is handed back as a ``Placement`` and written to the replay's own
ledger, which checks it: the allocation is never read from the index. A pod that the ledger
says fits on no node is dropped without asking the live code (which would try every type in
vain, the replay's slowest path); the ledger and the index hold the same free resources.
"""

from __future__ import annotations

import itertools
from collections import Counter

from bench.packing.cluster import Cluster, Ints, Placement
from bench.packing.trace import GPU_MILLI, Node, Pod
from services.scheduler.model import NodeCapacity, PendingJob, TaskDemand
from services.scheduler.node_index import NodeIndex
from services.scheduler.placement import place_gang, type_order
from services.scheduler.stranding import Shape, WorkloadMix


def node_capacity(node: Node) -> NodeCapacity:
    return NodeCapacity(
        node.name,
        free_gpus=list(range(node.gpus)),
        gpu_type=node.model,
        free_cpus=node.cpu_milli / 1000,
        free_memory_mb=node.memory_mib,
        sharing=True,
    )


def pending_job(pod: Pod, number: int) -> PendingJob:
    cpus, memory = pod.cpu_milli / 1000, pod.memory_mib
    if pod.fractional:
        task = TaskDemand("main", 1, 0, cpus, memory, gpu_milli=pod.gpu_milli)
    else:
        task = TaskDemand("main", 1, pod.num_gpu, cpus, memory)
    return PendingJob(f"{pod.name}-{number}", 1, 0, (task,))


class CorralLive:
    """The live policy over one replay (its index follows the replay's placements).

    The workload mix that stranding is weighed against holds what the planner's holds
    (``WorkloadMix.of``): the asks of the jobs pending and running, here every pod that has
    arrived, placed (running: nothing leaves) or not (in a live cluster it would still be
    waiting), this one included; none names a GPU type. ``whole``: every share rounded up
    to a whole GPU, as a cluster that does not share GPUs would run it."""

    def __init__(self, nodes: list[Node], whole: bool = False) -> None:
        self.index = NodeIndex(node_capacity(node) for node in nodes)
        self.rows = {node.name: row for row, node in enumerate(nodes)}
        self.numbers = itertools.count()
        self.whole = whole
        self.asks: Counter[Shape] = Counter()  # of every pod so far, placed or not

    def __call__(self, cluster: Cluster, pod: Pod, tie_rank: Ints) -> Placement | None:
        del tie_rank  # the live code breaks ties by itself
        asked = Pod(pod.name, pod.cpu_milli, pod.memory_mib, 1, GPU_MILLI) if self._rounds(pod) else pod
        if asked.num_gpu == 1:  # one-GPU asks only: stranding.py
            self.asks[(None, asked.cpu_milli / 1000, asked.memory_mib, asked.gpu_milli)] += 1
        if not cluster.feasible(asked).size:
            return None  # fits nowhere: the live code would try every type, and fail, at length
        job = pending_job(asked, next(self.numbers))
        self.index.mix = WorkloadMix(self.asks.copy())
        # As the planner places a job: GPU-less ones on any node, the others on the types
        # in ``type_order``, the first that holds it.
        types = type_order(job, self.index, self.index.types()) if job.gpus else [""]
        for gpu_type in types:
            placements = place_gang(job, self.index, gpu_type)
            if placements:
                (placed,) = placements
                return Placement(self.rows[placed.node_id], placed.gpu_indices)
        return None

    def _rounds(self, pod: Pod) -> bool:
        return self.whole and pod.fractional
