"""A node's sharers: what a task holding a share of a GPU finds in its environment.

The node's mode (``CORRAL_GPU_SHARING``, read by its exporter too) decides which variables
enforce the share (``shared/gpu_sharing.py``); the GPU's memory, for a task that asked for
no ``gpu_memory_mb``, is read once per GPU from the node's GPU reader.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.launcher.agent.gpu_share.processes import SIMULATED_MEMORY_MB, GpuProcesses
from services.launcher.agent.tasks import Task
from shared.gpu_sharing import GpuSharingSettings, share_environment, share_memory_mb
from shared.jobs import Resources


class GpuShares:
    def __init__(self, settings: GpuSharingSettings, reader: GpuProcesses | None) -> None:
        self.settings = settings
        self.reader = reader
        self._memory_mb: dict[int, int] = {}
        self.sharers: dict[str, tuple[Task, Resources]] = {}  # by attempt: the running tasks with a share

    def memory_total_mb(self, index: int) -> int:
        if index not in self._memory_mb:
            # Without a reader (no NVML, no scripted file) a simulated GPU's size stands in.
            self._memory_mb[index] = (
                self.reader.memory_total_mb(index) if self.reader else SIMULATED_MEMORY_MB
            )
        return self._memory_mb[index]

    def limit_mb(self, resources: Resources, gpu_index: int) -> int:
        """The GPU memory a share of this GPU may use."""
        return share_memory_mb(resources.gpu_milli, resources.gpu_memory_mb, self.memory_total_mb(gpu_index))

    def start_problem(self, gpu_indices: Sequence[int]) -> str:
        """Why a task given these GPUs cannot start on this node ("" when it can)."""
        if self.settings.mode == "mig" and gpu_indices:
            # Placed on MIG devices by type, but a MIG device is reached by its MIG UUID and the
            # parent's capability device nodes, which this agent does not give a task yet: run
            # on the parent's index, the task would get the wrong GPU, or none.
            return (
                "this node's GPUs are MIG devices, and its agent cannot yet give a task one (their "
                "MIG UUIDs and capability devices are not wired); run it on a node pool without MIG"
            )
        return ""

    def environment(self, resources: Resources, gpu_indices: Sequence[int]) -> dict[str, str]:
        """The share's variables for a task holding one ({} for whole GPUs)."""
        if not resources.gpu_milli or len(gpu_indices) != 1:
            return {}
        return share_environment(
            self.settings.mode,
            self.settings,
            milli=resources.gpu_milli,
            memory_mb=self.limit_mb(resources, gpu_indices[0]),
        )

    def follow(self, task: Task, resources: Resources) -> None:
        """A task started (or was re-adopted): remembered while it runs if it holds a share."""
        if resources.gpu_milli:
            self.sharers[task.attempt_id] = (task, resources)

    def stop(self, attempt_id: str) -> None:
        self.sharers.pop(attempt_id, None)
