"""Submit-time checks: a job that can never run is refused with a 422 that says why.

"Never" means on no registered node, ready or not: a drained node comes back, so a job
only it could hold is accepted and waits (its reason says so). A cluster with no node
registered yet (a fresh install) accepts everything: nothing is known to refuse on.

The cluster's shape is read once every few seconds, not per submit: submissions arrive
by the thousand per second and the node list changes by the minute.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from shared.errors import InvalidInput
from shared.gpu_types import gpu_type_of
from shared.jobs import JobSpec


@dataclass(frozen=True)
class TypeShape:
    nodes: int
    largest: int  # GPUs on the biggest node of the type
    total: int


@dataclass(frozen=True)
class ClusterShape:
    types: dict[str, TypeShape]
    # The most CPUs / memory (MiB) any node offers a task; None when some node reports
    # none (it sets no limit) or no node is known: then nothing is refused for them.
    largest_cpus: float | None = None
    largest_memory_mb: int | None = None
    # Whether some node runs task images (a container runtime, or Kubernetes' pods); None
    # when no node is known.
    runs_images: bool | None = None

    @classmethod
    def of(cls, nodes: Iterable[tuple[int, str | None, float, int, bool]]) -> ClusterShape:
        """From (GPU count, GPU model, CPUs, memory MiB, runs images) per registered node."""
        found: dict[str, list[int]] = {}
        cpus: list[float] = []
        memory: list[int] = []
        images: list[bool] = []
        for gpus, model, node_cpus, node_memory_mb, runs_images in nodes:
            images.append(runs_images)
            if gpus and model:
                found.setdefault(gpu_type_of(model), []).append(gpus)
            cpus.append(node_cpus)
            memory.append(node_memory_mb)
        return cls(
            {t: TypeShape(len(sizes), max(sizes), sum(sizes)) for t, sizes in found.items()},
            max(cpus) if cpus and all(cpus) else None,
            max(memory) if memory and all(memory) else None,
            any(images) if images else None,
        )


class ShapeCache:
    """The cluster's shape, read again when older than ``ttl_s``."""

    def __init__(self, load: Callable[[], Awaitable[ClusterShape]], ttl_s: float = 5.0) -> None:
        self._load = load
        self._ttl_s = ttl_s
        self._shape: ClusterShape | None = None
        self._at = 0.0

    async def get(self) -> ClusterShape:
        if self._shape is None or time.monotonic() - self._at > self._ttl_s:
            shape = await self._load()
            # An empty cluster is read again next time: its first node should count at once.
            self._shape = shape if shape.types else None
            self._at = time.monotonic()
            return shape
        return self._shape


def check_can_ever_run(spec: JobSpec, shape: ClusterShape) -> None:
    """Raise ``InvalidInput`` when no registered node (of the job's GPU type) could hold it."""
    _check_cpus_and_memory(spec, shape)
    _check_images(spec, shape)
    if not shape.types or spec.total_gpus == 0:
        return
    known = ", ".join(sorted(shape.types))
    if spec.gpu_type is not None and spec.gpu_type not in shape.types:
        raise InvalidInput(
            f"no node has GPUs of type {spec.gpu_type}; this cluster has {known}"
            " (`corral gpus` lists them). Ask for one of those, or leave resources.gpu_type out"
        )
    candidates = {spec.gpu_type: shape.types[spec.gpu_type]} if spec.gpu_type else shape.types
    largest = max(s.largest for s in candidates.values())
    kind = f" {spec.gpu_type}" if spec.gpu_type else ""
    widest = max(task.resources.gpus for task in spec.tasks)
    if widest > largest:
        raise InvalidInput(
            f"a task asks for {widest} GPUs on one node, but the largest{kind} node has {largest};"
            " split the work over more task instances with fewer GPUs each"
        )
    if spec.topology == "single_node" and spec.total_gpus > largest:
        raise InvalidInput(
            f"topology single_node needs all {spec.total_gpus} GPUs on one node, but the largest{kind}"
            f" node has {largest}; use topology pack, or fewer GPUs"
        )
    instances = sum(task.instances for task in spec.tasks if task.resources.gpus)
    nodes = max(s.nodes for s in candidates.values())
    if spec.topology == "one_per_node" and instances > nodes:
        raise InvalidInput(
            f"topology one_per_node needs {instances} nodes, but the cluster has {nodes}{kind}"
            f" node{'s' if nodes != 1 else ''};"
            " use topology pack, or fewer instances"
        )
    total = max(s.total for s in candidates.values())
    if spec.total_gpus > total:
        raise InvalidInput(f"the job needs {spec.total_gpus} GPUs, but the cluster has {total}{kind} in all")


def _check_cpus_and_memory(spec: JobSpec, shape: ClusterShape) -> None:
    for task in spec.tasks:
        cpus, memory_mb = task.resources.cpus, task.resources.memory_mb
        if shape.largest_cpus is not None and cpus > shape.largest_cpus:
            raise InvalidInput(
                f"task {task.name} asks for {cpus:g} CPUs per instance, but the largest node offers"
                f" {shape.largest_cpus:g}; ask for fewer (resources.cpus), or split the work"
            )
        if shape.largest_memory_mb is not None and memory_mb > shape.largest_memory_mb:
            raise InvalidInput(
                f"task {task.name} asks for {memory_mb} MiB of memory per instance, but the largest node"
                f" offers {shape.largest_memory_mb} MiB; ask for less (resources.memory_mb)"
            )


def _check_images(spec: JobSpec, shape: ClusterShape) -> None:
    """A task that names an image runs inside it, never on a host as if it named none: where
    no registered node runs images, such a job is refused unless it opts in to the host."""
    if shape.runs_images is not False or spec.allow_host_execution:
        return
    images = sorted({task.image for task in spec.tasks if task.image})
    if images:
        raise InvalidInput(
            f"the job's tasks run in image {', '.join(images)}, but no node of this cluster runs container"
            " images (none sets CORRAL_CONTAINER_RUNTIME, none is run by Kubernetes). Set"
            " allow_host_execution: true to run the command on a node's host, outside the image, or"
            " ask an operator for a node with a container runtime"
        )
