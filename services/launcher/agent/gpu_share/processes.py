"""Which processes use a GPU, and how much of its memory: NVML on a machine with NVIDIA
GPUs, a scripted file on one without.

The agent checks that sharers keep to their share by reading, per GPU, the processes that
hold a compute context and the device memory each uses
(``nvmlDeviceGetComputeRunningProcesses``). The pids NVML reports are the host's: the
agent runs in the host's pid namespace, and maps them to tasks through their cgroups.

**The scripted reader is a labelled stand-in**, for simulated GPUs (``make up`` on a
machine without GPUs, and tests): it reads ``CORRAL_GPU_SHARING_PROCESSES_FILE``, a JSON
file anyone can write, re-read when it changes::

    {"memory_total_mb": 81559, "gpus": {"0": [{"pid": 4242, "used_mb": 30000}]}}

It pretends nothing else: a machine with neither NVML nor the file has no reader, and its
sharers go unchecked (the agent says so once).
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

MIB = 1024 * 1024
SIMULATED_MEMORY_MB = 81559  # a simulated H100 80GB's, as the simulated exporter reports it


class GpuProcesses(Protocol):
    """What the agent reads of a GPU. Calls may block (NVML's do): run them in a thread."""

    def memory_total_mb(self, index: int) -> int: ...

    def processes(self, index: int) -> list[tuple[int, int]]:
        """(host pid, device memory used in MiB) of each process with a context on the GPU."""
        ...


class NvmlProcesses:
    """Real GPUs, through nvidia-ml-py."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml

    def _handle(self, index: int) -> object:
        return self._nvml.nvmlDeviceGetHandleByIndex(index)

    def memory_total_mb(self, index: int) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle(index)).total) // MIB

    def processes(self, index: int) -> list[tuple[int, int]]:
        handle = self._handle(index)
        found = list(self._nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        # Under MPS the clients are listed apart, each with its own memory (the compute
        # list holds the MPS server); a driver without MPS answers NotSupported.
        with contextlib.suppress(self._nvml.NVMLError_NotSupported, self._nvml.NVMLError_FunctionNotFound):
            found += self._nvml.nvmlDeviceGetMPSComputeRunningProcesses(handle)
        memory: dict[int, int] = {}
        for p in found:
            # usedGpuMemory is None where the driver cannot tell (some vGPU guests): 0 then.
            memory[int(p.pid)] = max(memory.get(int(p.pid), 0), int(p.usedGpuMemory or 0) // MIB)
        return list(memory.items())

    def close(self) -> None:
        self._nvml.nvmlShutdown()


class ScriptedProcesses:
    """Simulated GPUs' processes, as a file says (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._total = SIMULATED_MEMORY_MB
        self._gpus: dict[int, list[tuple[int, int]]] = {}

    def _reload(self) -> None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._gpus = None, {}
            return
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            data = json.loads(self.path.read_text())
            self._total = int(data.get("memory_total_mb", SIMULATED_MEMORY_MB))
            self._gpus = {
                int(index): [(int(p["pid"]), int(p["used_mb"])) for p in listed]
                for index, listed in data.get("gpus", {}).items()
            }
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("%s is not a GPU processes file (%s); reading no processes", self.path, exc)
            self._gpus = {}

    def memory_total_mb(self, index: int) -> int:  # noqa: ARG002 - every simulated GPU is alike
        self._reload()
        return self._total

    def processes(self, index: int) -> list[tuple[int, int]]:
        self._reload()
        return list(self._gpus.get(index, []))


def open_reader(processes_file: Path | None) -> GpuProcesses | None:
    """NVML on a machine with NVIDIA GPUs; else the scripted file when one is set (simulated
    GPUs); else None (nothing to read)."""
    try:
        return NvmlProcesses()
    except Exception as exc:  # no NVIDIA driver (NVMLError_LibraryNotFound, DriverNotLoaded, ...)
        if processes_file is not None:
            return ScriptedProcesses(processes_file)
        log.info("no NVML on this node (%s): GPU sharers are not checked", exc)
        return None
