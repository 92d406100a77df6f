"""What is left on every node while pods are placed: the replay's own ledger, checked on every write.

The policies only read it; the replay writes it (``Cluster.place``) with each placement a
policy chose, and refuses a placement that would over-commit a GPU (more than 1,000
thousandths), a node's CPU or memory, or that spreads a share over several GPUs: the
allocation reported is what this ledger holds, whatever a policy's own books say.

Arrays, one row per node (NumPy, so that a policy scores every node of the cluster for a
pod in a few vector operations): CPU and memory left, the thousandths left on each GPU (a
node has at most 8; GPUs it does not have are rows of 0, which no pod can use and which add
nothing to any sum), and per node a counter of the writes to it, which lets a policy keep
per-node caches and refresh only the nodes that changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bench.packing.trace import GPU_MILLI, Node, Pod

MAX_GPUS = 8
Ints = npt.NDArray[np.int64]


class OvercommitError(RuntimeError):
    """A policy chose a placement the node cannot hold."""


@dataclass(frozen=True, slots=True)
class Placement:
    node: int  # the node's row
    gpus: tuple[int, ...]  # its GPU indices: one for a share, ``num_gpu`` whole ones, none


class Cluster:
    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = list(nodes)
        count = len(self.nodes)
        self.cpu_left: Ints = np.array([n.cpu_milli for n in self.nodes], dtype=np.int64)
        self.memory_left: Ints = np.array([n.memory_mib for n in self.nodes], dtype=np.int64)
        self.gpus: Ints = np.array([n.gpus for n in self.nodes], dtype=np.int64)
        self.gpu_left: Ints = np.zeros((count, MAX_GPUS), dtype=np.int64)
        for row, node in enumerate(self.nodes):
            self.gpu_left[row, : node.gpus] = GPU_MILLI
        # Derived per node, kept up to date by ``place``: what feasibility checks read.
        self.gpu_left_total: Ints = self.gpu_left.sum(axis=1)
        self.most_left: Ints = self.gpu_left.max(axis=1)
        self.whole_free: Ints = (self.gpu_left == GPU_MILLI).sum(axis=1)
        self.writes: Ints = np.zeros(count, dtype=np.int64)
        self.total_gpu_milli = int(self.gpus.sum()) * GPU_MILLI
        self.allocated_gpu_milli = 0
        self.placed: list[tuple[Pod, Placement]] = []
        self.dropped = 0  # pods that fitted nowhere

    def feasible(self, pod: Pod) -> Ints:
        """The rows of the nodes that can hold the pod (the fit rules of the module docstring)."""
        fits = (self.cpu_left >= pod.cpu_milli) & (self.memory_left >= pod.memory_mib)
        if pod.fractional:
            fits &= self.most_left >= pod.gpu_milli
        elif pod.num_gpu:
            fits &= self.whole_free >= pod.num_gpu
        return np.flatnonzero(fits)

    def lowest_whole(self, node: int, count: int) -> tuple[int, ...]:
        """The ``count`` lowest-indexed whole free GPUs of the node."""
        free = np.flatnonzero(self.gpu_left[node] == GPU_MILLI)
        return tuple(int(g) for g in free[:count])

    def tightest_share(self, node: int, milli: int) -> int:
        """The GPU of the node with the least left that still holds ``milli`` (lowest index on ties)."""
        left = self.gpu_left[node]
        room = np.where(left >= milli, left, GPU_MILLI + 1)
        return int(np.argmin(room))

    def place(self, pod: Pod, placement: Placement) -> None:
        """Take what the pod asks for on the chosen node and GPUs, or raise ``OvercommitError``."""
        row, gpus = placement.node, placement.gpus
        if not 0 <= row < len(self.nodes):
            raise OvercommitError(f"{pod.name}: no node {row}")
        node = self.nodes[row]
        # Plain ints: a handful of NumPy scalar operations per pod cost more than the rest.
        cpu, memory = int(self.cpu_left[row]), int(self.memory_left[row])
        left = self.gpu_left[row].tolist()
        if cpu < pod.cpu_milli or memory < pod.memory_mib:
            raise OvercommitError(
                f"{pod.name} on {node.name}: asks {pod.cpu_milli} mCPU and {pod.memory_mib} MiB, "
                f"{cpu} mCPU and {memory} MiB left"
            )
        if len(set(gpus)) != len(gpus) or len(gpus) != pod.num_gpu:
            raise OvercommitError(f"{pod.name} on {node.name}: asks {pod.num_gpu} GPU(s), got {gpus}")
        for gpu in gpus:
            if not 0 <= gpu < node.gpus:
                raise OvercommitError(f"{pod.name} on {node.name}: no GPU {gpu}")
            if left[gpu] < pod.gpu_milli:
                raise OvercommitError(
                    f"{pod.name} on {node.name}: GPU {gpu} has {left[gpu]} thousandths left, "
                    f"the pod asks {pod.gpu_milli}"
                )
            left[gpu] -= pod.gpu_milli
            self.gpu_left[row, gpu] = left[gpu]
        self.cpu_left[row] = cpu - pod.cpu_milli
        self.memory_left[row] = memory - pod.memory_mib
        self.gpu_left_total[row] = sum(left)
        self.most_left[row] = max(left)
        self.whole_free[row] = left.count(GPU_MILLI)
        self.writes[row] += 1
        self.allocated_gpu_milli += pod.gpu_request
        self.placed.append((pod, placement))

    @property
    def allocation_ratio(self) -> float:
        return self.allocated_gpu_milli / self.total_gpu_milli if self.total_gpu_milli else 0.0


def select_host(rows: Ints, scores: npt.NDArray[np.float64], tie_rank: Ints) -> int:
    """The node with the highest score; among equal scores, the lowest ``tie_rank``.

    The paper's simulator runs a Kubernetes scheduler patched to break ties by the smallest
    node name, and names the nodes with a seeded random prefix when it creates them: ties
    go to the same nodes all through a replay, in an order drawn once per seed."""
    top = rows[scores == scores.max()]
    return int(top[np.argmin(tie_rank[top])]) if top.size > 1 else int(top[0])
