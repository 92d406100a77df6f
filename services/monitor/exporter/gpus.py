"""Reading GPUs behind one small protocol: NVML for real GPUs, a simulated backend else.

NVML calls block, so callers run ``sample()`` in a worker thread (``asyncio.to_thread``).
The simulated backend is honest about itself: ``simulated`` is True and its model name
says "Simulated", so no chart or table can mistake it for hardware. (Fault injection —
Xids, ECC, lost GPUs — arrives with the monitor issue; the protocol already carries
per-GPU readings where a missing value is ``None``.)
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from typing import Protocol

from shared.events.types import GpuSample

log = logging.getLogger(__name__)


class GpuBackend(Protocol):
    simulated: bool

    def sample(self) -> list[GpuSample]: ...

    def close(self) -> None: ...


class SimulatedGpus:
    """N identical GPUs with gently varying, plausible readings."""

    simulated = True

    def __init__(self, count: int, model: str, node_id: str, memory_total_mb: int = 81_559) -> None:
        self._model = model
        self._memory_total_mb = memory_total_mb
        # Stable per node and index, so a restarted exporter reports the same inventory.
        self._uuids = [
            f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'corral-sim/{node_id}/{i}')}" for i in range(count)
        ]

    def sample(self) -> list[GpuSample]:
        phase = time.time() / 60.0
        return [
            GpuSample(
                index=i,
                uuid=gpu_uuid,
                model=self._model,
                memory_total_mb=self._memory_total_mb,
                memory_used_mb=0,
                utilization_pct=0.0,
                temperature_c=round(32.0 + 2.0 * math.sin(phase + i), 1),
            )
            for i, gpu_uuid in enumerate(self._uuids)
        ]

    def close(self) -> None:
        return None


class NvmlGpus:
    """Real GPUs through nvidia-ml-py (``pynvml``)."""

    simulated = False

    def __init__(self) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    def _read(self, call: str, *args: object) -> object | None:
        try:
            value: object = getattr(self._nvml, call)(*args)
            return value
        except self._nvml.NVMLError as exc:
            log.debug("NVML %s unavailable: %s", call, exc)
            return None

    def sample(self) -> list[GpuSample]:
        samples = []
        for index, handle in enumerate(self._handles):
            memory = self._read("nvmlDeviceGetMemoryInfo", handle)
            util = self._read("nvmlDeviceGetUtilizationRates", handle)
            temp = self._read("nvmlDeviceGetTemperature", handle, self._nvml.NVML_TEMPERATURE_GPU)
            samples.append(
                GpuSample(
                    index=index,
                    uuid=str(self._read("nvmlDeviceGetUUID", handle) or f"unknown-{index}"),
                    model=str(self._read("nvmlDeviceGetName", handle) or "unknown"),
                    memory_total_mb=int(getattr(memory, "total", 0)) // (1024 * 1024),
                    memory_used_mb=(int(memory.used) // (1024 * 1024)) if memory is not None else None,  # type: ignore[attr-defined]
                    utilization_pct=float(util.gpu) if util is not None else None,  # type: ignore[attr-defined]
                    temperature_c=float(temp) if isinstance(temp, int | float) else None,
                )
            )
        return samples

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def open_backend(kind: str, *, node_id: str, simulated_gpus: int, simulated_model: str) -> GpuBackend:
    if kind in ("auto", "nvml"):
        try:
            backend = NvmlGpus()
        except Exception as exc:  # NVMLError_LibraryNotFound, driver missing, ...
            if kind == "nvml":
                raise RuntimeError(f"NVML is not usable on this machine: {exc}") from exc
            log.info("no NVML here (%s); using %d simulated GPUs", exc, simulated_gpus)
        else:
            if backend._handles or kind == "nvml":
                return backend
            backend.close()
    return SimulatedGpus(simulated_gpus, simulated_model, node_id)
