"""Jobs that run in an image go only to nodes that run images.

A task that names an image runs inside it (a container runtime on the node, or a pod on a
node Kubernetes runs), never on the host as if no image had been named; a job that sets
``allow_host_execution`` may run anywhere and is not a concern here
(``PendingJob.needs_image_runtime`` says which jobs are).

Kept off the planner's hot path on purpose: a job without an image takes the planner's
path unchanged, and so does a job with one where every ready node runs images (the usual
cluster: a pool either has a runtime or has none). Only where some ready nodes run images
and others do not does an image job take the path below: the nodes that cannot run it are
hidden from the index for the attempt (their free GPUs and the room on their shared GPUs
taken, their CPUs and memory made none), then given back, whatever the attempt found.
Hiding costs a walk over those nodes per such job — bearable for the few image jobs of a
mixed cluster, where a filter inside every index lookup would cost every job.

The trade-off accepted: in a mixed cluster, an image job preempts nobody. Victims are
chosen over every node, and freeing GPUs on a node that cannot run the job would stop work
for nothing; such a job waits for room on the nodes that can run it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cached_property

from services.scheduler.model import NodeCapacity, PendingJob, PendingReason
from services.scheduler.node_index import NodeIndex
from services.scheduler.stranding import SHARE_UNITS

SETTING = "CORRAL_CONTAINER_RUNTIME"


class ImageNodes:
    """Which ready nodes of a cycle run images, worked out on the first image job only."""

    def __init__(self, nodes: list[NodeCapacity]) -> None:
        self._nodes = nodes

    @cached_property
    def unable(self) -> list[NodeCapacity]:
        """The ready nodes that cannot run images."""
        return [node for node in self._nodes if not node.runs_images]

    @property
    def everywhere(self) -> bool:
        return not self.unable

    @property
    def nowhere(self) -> bool:
        return len(self.unable) == len(self._nodes)


def no_image_node() -> str:
    """Why a job whose tasks name an image waits where no ready node runs images."""
    return (
        f"its tasks run in an image, and no ready node runs container images ({SETTING}); a node"
        f" runs them once its operator sets {SETTING} (podman, docker or apptainer), or is run by"
        " Kubernetes."
        " To run the job on a node's host instead, outside its image, submit it with"
        " allow_host_execution: true"
    )


def no_image_room(job: PendingJob) -> str:
    """Why an image job waits where some ready nodes run images, but none has room for it."""
    return (
        f"its tasks run in an image; the ready nodes that run container images ({SETTING}) have no"
        f" room for it now (it needs {job.gpus:g} GPUs)"
    )


def place_image_job(
    job: PendingJob,
    index: NodeIndex,
    nodes: ImageNodes,
    try_place: Callable[[str, bool], bool],
    guaranteed: list[str],
    candidates: list[str],
) -> tuple[PendingReason, str] | None:
    """Place an image job where not every ready node runs images: on a type of its VC's
    quota (``guaranteed``), else, borrowing, on the other ``candidates`` (never for a
    service replica); ``try_place(gpu_type, borrowed)`` places and commits. None when
    placed, else why it waits."""
    if nodes.nowhere:
        return "GangDoesNotFit", no_image_node()
    with _hidden(index, nodes.unable):
        if not job.gpus:
            placed = try_place("", False)
        else:
            placed = any(try_place(gpu_type, False) for gpu_type in guaranteed) or (
                not job.service
                and any(try_place(gpu_type, True) for gpu_type in candidates if gpu_type not in guaranteed)
            )
    return None if placed else ("InsufficientGPUs", no_image_room(job))


@contextmanager
def _hidden(index: NodeIndex, nodes: list[NodeCapacity]) -> Iterator[None]:
    """These nodes offer nothing while the block runs (their GPUs, shares' room, CPUs and
    memory); what the block placed elsewhere stays placed."""
    saved = []
    for node in nodes:
        gpus = list(node.free_gpus)
        if gpus:
            index.take_exact(node.node_id, gpus)
        room = {gpu: SHARE_UNITS - used for gpu, used in node.shares.items() if used < SHARE_UNITS}
        for gpu, milli in room.items():
            index.take_share(node.node_id, gpu, milli)
        saved.append((node, gpus, room, node.free_cpus, node.free_memory_mb))
        node.free_cpus, node.free_memory_mb = -1.0, -1
    try:
        yield
    finally:
        for node, gpus, room, cpus, memory_mb in saved:
            node.free_cpus, node.free_memory_mb = cpus, memory_mb
            for gpu, milli in room.items():
                index.give_share(node.node_id, gpu, milli)
            if gpus:
                index.give(node.node_id, gpus)
