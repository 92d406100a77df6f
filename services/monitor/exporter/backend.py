"""Reading GPUs behind one small protocol: NVML for real GPUs, a simulated backend else.

A backend's ``sample()`` may block (NVML calls do), so the exporter always runs it in a
worker thread (``asyncio.to_thread``); nothing here may touch the event loop.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from shared.events.nodes import GpuSample

log = logging.getLogger(__name__)


class GpuBackend(Protocol):
    simulated: bool

    def sample(self) -> list[GpuSample]: ...

    def close(self) -> None: ...


def open_backend(
    kind: str,
    *,
    node_id: str,
    simulated_gpus: int,
    simulated_model: str,
    faults_file: Path | None = None,
    simulated_nvlink_domain_size: int = 0,
) -> GpuBackend:
    """NVML when asked for, or ("auto") when it finds GPUs; the simulated GPUs otherwise."""
    from services.monitor.exporter.simulated import SimulatedGpus

    if kind in ("auto", "nvml"):
        from services.monitor.exporter.nvml import NvmlGpus

        try:
            backend = NvmlGpus()
        except Exception as exc:  # NVMLError_LibraryNotFound, driver missing, ...
            if kind == "nvml":
                raise RuntimeError(f"NVML is not usable on this machine: {exc}") from exc
            log.info("no NVML here (%s); using %d simulated GPUs", exc, simulated_gpus)
        else:
            if backend.gpu_count or kind == "nvml":
                return backend
            backend.close()
    return SimulatedGpus(
        simulated_gpus,
        simulated_model,
        node_id,
        faults_file=faults_file,
        nvlink_domain_size=simulated_nvlink_domain_size,
    )
