"""Reading GPUs behind one small protocol: NVML for real GPUs, a simulated backend else.

A backend's ``sample()`` may block (NVML calls do), so the exporter always runs it in a
worker thread (``asyncio.to_thread``); nothing here may touch the event loop.

**A node never pretends.** Simulated GPUs are for a machine that has no NVIDIA GPU at all
(``make up`` on a laptop, tests, benchmarks). On a machine whose kernel sees NVIDIA GPUs
(``nvidia_devices``) and whose NVML fails (a broken or missing driver, a library that
does not match it), the exporter reports no GPUs and NVML's error (``fault``), so the
monitor drains the node: a GPU server with a broken driver must not become eight
simulated GPUs that take real jobs. It tries NVML again every ``RETRY_S``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from shared.events.nodes import GpuSample

if TYPE_CHECKING:
    from services.monitor.exporter.nvml import NvmlGpus

log = logging.getLogger(__name__)

NVIDIA_PCI_VENDOR = "0x10de"
# PCI base class 0x03: display controllers (VGA 0x0300, 3D 0x0302: every data-centre GPU).
# NVIDIA's other functions (audio 0x0403, USB 0x0c03, NVSwitch bridges 0x0680) are not GPUs.
DISPLAY_CLASS_PREFIX = "0x03"
RETRY_S = 60.0


class GpuBackend(Protocol):
    simulated: bool

    @property
    def fault(self) -> str:
        """Why this node's GPUs cannot be read; empty when they can."""
        ...

    def sample(self) -> list[GpuSample]: ...

    def close(self) -> None: ...


def nvidia_devices(root: Path = Path("/")) -> list[str]:
    """The PCI addresses of the NVIDIA GPUs the kernel sees, whether or not NVML works.

    ``root`` is where the machine's ``/sys`` is found (``/`` on the node itself; a
    container may see the host's under another path)."""
    found = []
    for device in sorted((root / "sys" / "bus" / "pci" / "devices").glob("*")):
        try:
            vendor = (device / "vendor").read_text().strip().lower()
            device_class = (device / "class").read_text().strip().lower()
        except OSError:
            continue
        if vendor == NVIDIA_PCI_VENDOR and device_class.startswith(DISPLAY_CLASS_PREFIX):
            found.append(device.name)
    return found


class UnreadableGpus:
    """A machine with NVIDIA GPUs whose NVML fails: no GPUs, and the reason, until NVML
    answers (tried again every ``RETRY_S``; then it reads like ``NvmlGpus``)."""

    simulated = False

    def __init__(self, error: str, devices: list[str]) -> None:
        self._error = _one_line(error)
        self._devices = devices
        self._nvml: NvmlGpus | None = None
        self._tried = time.monotonic()
        log.error(
            "%s; the node reports no GPUs and this error, and takes no work until NVML works "
            "(NVIDIA devices seen: %s)",
            self.fault,
            ", ".join(devices) or "none",
        )

    @property
    def fault(self) -> str:
        if self._nvml is not None:
            return ""
        if not self._devices:
            return f"NVML fails: {self._error}"
        return f"NVML fails on a machine with {len(self._devices)} NVIDIA GPU(s): {self._error}"

    def sample(self) -> list[GpuSample]:
        if self._nvml is None and time.monotonic() - self._tried >= RETRY_S:
            self._tried = time.monotonic()
            from services.monitor.exporter.nvml import NvmlGpus

            try:
                self._nvml = NvmlGpus()
            except Exception as exc:  # still broken: keep the newest reason
                self._error = _one_line(str(exc) or type(exc).__name__)
            else:
                log.warning("NVML works again on this machine: %d GPU(s)", self._nvml.gpu_count)
        return self._nvml.sample() if self._nvml is not None else []

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml.close()


def _one_line(text: str, limit: int = 500) -> str:
    """An error as one short line: it travels in every heartbeat."""
    return " ".join(text.split())[:limit]


def open_backend(
    kind: str,
    *,
    node_id: str,
    simulated_gpus: int,
    simulated_model: str,
    faults_file: Path | None = None,
    simulated_nvlink_domain_size: int = 0,
    device_root: Path = Path("/"),
) -> GpuBackend:
    """NVML when asked for, or ("auto") on a machine with NVIDIA GPUs; simulated GPUs
    when asked for, or ("auto") on a machine with none (see the module's docstring)."""
    from services.monitor.exporter.simulated import SimulatedGpus

    if kind in ("auto", "nvml"):
        from services.monitor.exporter.nvml import NvmlGpus

        devices = nvidia_devices(device_root)
        try:
            backend = NvmlGpus()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            if kind == "nvml" or devices:
                return UnreadableGpus(str(exc) or type(exc).__name__, devices)
            log.info("no NVIDIA GPU on this machine (%s); using %d simulated GPUs", exc, simulated_gpus)
        else:
            if backend.gpu_count or kind == "nvml" or devices:
                return backend
            backend.close()
    return SimulatedGpus(
        simulated_gpus,
        simulated_model,
        node_id,
        faults_file=faults_file,
        nvlink_domain_size=simulated_nvlink_domain_size,
    )
