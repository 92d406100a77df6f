"""The Alibaba GPU-sharing trace (``alibaba_openb_*``): nodes, pods, and the order pods arrive in.

Files and columns: ``../shared/traces/README.md``, section "Alibaba GPU-sharing trace, 2023".
Only what placement reads is kept: a node's CPU (milli-cores), memory (MiB) and GPUs; a pod's
CPU, memory, GPU count and share of each GPU (``gpu_milli``). ``gpu_spec`` is empty in every
file here, so any pod may use any GPU model and the model is kept for Corral's index only.

Arrivals follow the paper's simulator (hkust-adsl/kubernetes-scheduler-simulator, run with
``--shuffle-pod=true -tune 1.3``): the whole list in a seeded random order, then pods drawn
*with replacement* from the list and appended until the arrived GPU request reaches ``load``
times the cluster's GPUs; the first draw that would go past it ends the list. The
simulator checks that bound against a drawn pod's per-GPU share rather than its whole
request, which lets one multi-GPU pod overshoot by a few GPUs; the whole request is used here.
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
NODES_FILE = TRACES / "alibaba_openb_nodes_2023.csv"
PODS_FILE = TRACES / "alibaba_openb_pods_2023.csv"
# The pod lists that sweep the fractional share of GPU demand, by the name their file ends in.
VARIANTS = {name: TRACES / f"alibaba_openb_pods_2023_{name}.csv" for name in (
    "gpushare20", "gpushare40", "gpushare60", "gpushare80", "gpushare100",
)}  # fmt: skip
GPU_MILLI = 1000  # a whole GPU, in the thousandths shares are counted in


class TraceError(ValueError):
    """A trace file that cannot be replayed: the message names the file and the line."""


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class Pod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # of each of its GPUs: 1-999 for a share of one GPU, 1000 for whole GPUs

    @property
    def fractional(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < GPU_MILLI

    @property
    def gpu_request(self) -> int:
        """Its whole GPU request, in thousandths of a GPU."""
        return self.num_gpu * self.gpu_milli


def _rows(path: Path, columns: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    try:
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            missing = set(columns) - set(reader.fieldnames or ())
            if missing:
                raise TraceError(f"{path}: missing columns {sorted(missing)}")
            return [(number, row) for number, row in enumerate(reader, start=2)]
    except OSError as error:
        raise TraceError(f"{path}: {error.strerror}") from error


def _int(path: Path, number: int, row: dict[str, str], column: str) -> int:
    try:
        return int(row[column])
    except ValueError:
        raise TraceError(f"{path}:{number}: {column} is {row[column]!r}, not a whole number") from None


def load_nodes(path: Path = NODES_FILE) -> list[Node]:
    nodes = []
    for number, row in _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model")):
        cpu, memory, gpus = (_int(path, number, row, c) for c in ("cpu_milli", "memory_mib", "gpu"))
        if min(cpu, memory, gpus) < 0 or gpus > 8:
            raise TraceError(f"{path}:{number}: negative resources or more than 8 GPUs")
        nodes.append(Node(row["sn"], cpu, memory, gpus, row["model"]))
    if not nodes:
        raise TraceError(f"{path}: no nodes")
    return nodes


def load_pods(path: Path = PODS_FILE) -> list[Pod]:
    pods = []
    for number, row in _rows(path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")):
        cpu, memory, count, milli = (
            _int(path, number, row, c) for c in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
        )
        whole = milli == GPU_MILLI and count >= 1
        share = count == 1 and 0 < milli < GPU_MILLI
        cpu_only = count == 0 and milli == 0
        if min(cpu, memory) < 0 or not (whole or share or cpu_only):
            raise TraceError(
                f"{path}:{number}: num_gpu={count}, gpu_milli={milli}: a pod asks for whole GPUs "
                "(gpu_milli 1000), a share of one GPU (num_gpu 1, gpu_milli 1-999) or none"
            )
        pods.append(Pod(row["name"], cpu, memory, count, milli))
    if not pods:
        raise TraceError(f"{path}: no pods")
    return pods


def arrivals(pods: list[Pod], total_gpus: int, load: float, seed: int) -> list[Pod]:
    """The pods in the order they arrive: the list shuffled, then draws with replacement
    until the arrived GPU request reaches ``load`` x ``total_gpus`` (or, with a list bigger
    than that, the shuffled list cut where it would go past it)."""
    rng = random.Random(seed)
    order = sorted(pods, key=lambda pod: pod.name)  # the simulator sorts by name, then shuffles
    rng.shuffle(order)
    target = load * total_gpus * GPU_MILLI
    arrived: list[Pod] = []
    requested = 0
    for pod in order:
        if requested + pod.gpu_request > target:
            return arrived
        arrived.append(pod)
        requested += pod.gpu_request
    if not any(pod.gpu_request for pod in pods):
        return arrived  # nothing drawn could ever reach the target
    while True:
        pod = pods[rng.randrange(len(pods))]
        if requested + pod.gpu_request > target:
            return arrived
        arrived.append(pod)
        requested += pod.gpu_request
