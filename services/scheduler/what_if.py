"""What-ifs over the node index: a running job's GPUs handed back for a moment (would the
job in question fit without it?), then taken again, whole GPUs and shares alike."""

from __future__ import annotations

from collections.abc import Iterable

from services.scheduler.model import RunningJob
from services.scheduler.node_index import SHARE_UNITS, NodeIndex

Given = tuple[str, tuple[int, ...], int]  # (node, GPUs, share in thousandths; 0: whole)


def give_back(index: NodeIndex, running: RunningJob) -> list[Given]:
    """Hand back what ``running`` holds on ready nodes, as if it had stopped; what was
    handed back, for ``take_again``."""
    given: list[Given] = []
    shares = running.shares or (0,) * len(running.slices)
    for (node_id, gpus), milli in zip(running.slices, shares, strict=True):
        if node_id not in index.nodes or not gpus:
            continue
        if milli:
            index.give_share(node_id, gpus[0], milli)
        else:
            index.give(node_id, gpus)
        given.append((node_id, gpus, milli))
    return given


def take_again(index: NodeIndex, given: Iterable[Given]) -> None:
    """Undo ``give_back``: the jobs hold again what they held."""
    for node_id, gpus, milli in given:
        if milli:
            index.take_share(node_id, gpus[0], milli)
        else:
            index.take_exact(node_id, gpus)


def share_fits(index: NodeIndex, node_id: str, gpu: int, milli: int) -> bool:
    """Whether a share of ``milli`` could be taken on the node's GPU now."""
    node = index.nodes[node_id]
    used = node.shares.get(gpu)
    return gpu in node.free_gpus if used is None else used + milli <= SHARE_UNITS
