"""Real GPUs through nvidia-ml-py (``pynvml``).

Every field is read on its own, so one unsupported or failing reading never hides the
others: NVML's ``NotSupported`` leaves the field ``None`` and names it in
``unsupported``; ``GPU_IS_LOST`` (the GPU fell off the bus) marks the whole GPU
``lost``. Xid errors are not polled — NVML reports them as events — so a daemon thread
waits on an NVML event set and keeps the last Xid and a count per GPU for the sampler.

A GPU in MIG mode is reported as its MIG devices, each a GPU of its own type: which
devices, their indices and which readings come from the chip are in ``mig.py``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pynvml

from services.monitor.exporter.mig import ReportedGpu, mig_model, read_layout
from services.monitor.exporter.topology import nvlink_domains
from shared.events.nodes import GpuSample

if TYPE_CHECKING:
    from services.monitor.exporter.backend import GpuBackend

log = logging.getLogger(__name__)

MIB = 1024 * 1024

# NVML's clock-event (formerly "throttle") reason bits, by the names NVML documents.
THROTTLE_REASONS = {
    pynvml.nvmlClocksEventReasonGpuIdle: "GpuIdle",
    pynvml.nvmlClocksEventReasonApplicationsClocksSetting: "ApplicationsClocksSetting",
    pynvml.nvmlClocksEventReasonSwPowerCap: "SwPowerCap",
    pynvml.nvmlClocksEventReasonHwSlowdown: "HwSlowdown",
    pynvml.nvmlClocksEventReasonSyncBoost: "SyncBoost",
    pynvml.nvmlClocksEventReasonSwThermalSlowdown: "SwThermalSlowdown",
    pynvml.nvmlClocksEventReasonHwThermalSlowdown: "HwThermalSlowdown",
    pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown: "HwPowerBrakeSlowdown",
    pynvml.nvmlClocksEventReasonDisplayClockSetting: "DisplayClockSetting",
}


def throttle_reason_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


class GpuLost(Exception):
    """NVML answered GPU_IS_LOST: the GPU is gone until the node is repaired."""


class _Reader:
    """Reads one GPU's fields, recording the unsupported ones instead of failing."""

    def __init__(self, handle: object, unsupported: list[str] | None = None) -> None:
        self.handle = handle
        self.unsupported: list[str] = [] if unsupported is None else unsupported

    def on(self, handle: object) -> _Reader:
        """A reader of another handle (a MIG device's GPU) that records into the same list."""
        return _Reader(handle, self.unsupported)

    def read(self, field: str, call: Callable[..., Any], *args: object) -> Any:
        try:
            return call(self.handle, *args)
        except pynvml.NVMLError as exc:
            if exc.value == pynvml.NVML_ERROR_GPU_IS_LOST:
                raise GpuLost from exc
            if exc.value == pynvml.NVML_ERROR_NOT_SUPPORTED:
                self.unsupported.append(field)
            else:
                log.debug("NVML could not read %s: %s", field, exc)
            return None


class XidWatcher:
    """Waits on NVML's Xid event set in a daemon thread; the last Xid and a count per GPU."""

    def __init__(self, handles: list[object]) -> None:
        self.last_xid: dict[int, int] = {}
        self.count: dict[int, int] = {}
        self.supported = True
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._index_of = {id(h): i for i, h in enumerate(handles)}
        self._event_set = pynvml.nvmlEventSetCreate()
        registered = 0
        for index, handle in enumerate(handles):
            try:
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, self._event_set)
                registered += 1
            except pynvml.NVMLError as exc:  # not supported in some VMs and on old GPUs
                log.warning("GPU %d: Xid events unavailable (%s)", index, exc)
        self.supported = registered > 0
        self._uuids = [pynvml.nvmlDeviceGetUUID(h) for h in handles]
        self._thread = threading.Thread(target=self._run, name="nvml-xid", daemon=True)
        if self.supported:
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = pynvml.nvmlEventSetWait_v2(self._event_set, 500)
            except pynvml.NVMLError as exc:
                if exc.value != pynvml.NVML_ERROR_TIMEOUT:
                    log.warning("NVML event wait failed (%s)", exc)
                    self._stop.wait(1.0)
                continue
            index = self._index(data.device)
            xid = int(data.eventData)
            log.warning("GPU %s reported Xid %d", index, xid)
            with self._lock:
                self.last_xid[index] = xid
                self.count[index] = self.count.get(index, 0) + 1

    def _index(self, device: object) -> int:
        try:
            return self._uuids.index(pynvml.nvmlDeviceGetUUID(device))
        except (pynvml.NVMLError, ValueError):
            return -1

    def snapshot(self, index: int) -> tuple[int | None, int]:
        with self._lock:
            return self.last_xid.get(index), self.count.get(index, 0)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlEventSetFree(self._event_set)


class NvmlGpus:
    """Every GPU NVML sees on this machine, a GPU in MIG mode as its MIG devices."""

    simulated = False
    fault = ""  # (GpuBackend: nothing stops this backend reading its GPUs)

    def __init__(self) -> None:
        pynvml.nvmlInit()
        gpus = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        layout = read_layout(gpus)
        self._devices = layout.devices
        self.mig_gpus = layout.mig_gpus
        # Identity that outlives a lost GPU (a lost GPU answers nothing, not even its name).
        self._identity = [self._identify(d, i) for i, d in enumerate(self._devices)]
        self._domains = nvlink_domains(len(self._devices), self._nvlinked)
        self._xids = XidWatcher(gpus)

    def _nvlinked(self, i: int, j: int) -> bool:
        """NVML's peer-to-peer status over NVLink; an error (no NVLink on these GPUs, an
        old driver) means not connected, so such GPUs get a domain each. MIG devices have
        no peer-to-peer access at all: each is a domain of its own."""
        a, b = self._devices[i], self._devices[j]
        if a.mig or b.mig:
            return False
        try:
            status = pynvml.nvmlDeviceGetP2PStatus(a.handle, b.handle, pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
        except pynvml.NVMLError:
            return False
        return bool(status == pynvml.NVML_P2P_STATUS_OK)

    @staticmethod
    def _identify(device: ReportedGpu, index: int) -> tuple[str, str, int]:
        try:
            memory = pynvml.nvmlDeviceGetMemoryInfo(device.handle)
            model = str(pynvml.nvmlDeviceGetName(device.gpu_handle))
            if device.mig:
                gpu_memory = pynvml.nvmlDeviceGetMemoryInfo(device.gpu_handle)
                model = mig_model(model, device.handle, int(gpu_memory.total))
            return str(pynvml.nvmlDeviceGetUUID(device.handle)), model, int(memory.total) // MIB
        except pynvml.NVMLError:
            return f"unknown-{index}", "unknown", 0

    @property
    def gpu_count(self) -> int:
        """The GPUs the node reports: whole GPUs and MIG devices."""
        return len(self._devices)

    def sample(self) -> list[GpuSample]:
        return [self._sample_one(i, d) for i, d in enumerate(self._devices)]

    def _sample_one(self, index: int, device: ReportedGpu) -> GpuSample:
        uuid, model, memory_total_mb = self._identity[index]
        last_xid, xid_count = self._xids.snapshot(device.gpu)
        base = {
            "index": index,
            "uuid": uuid,
            "model": model,
            "memory_total_mb": memory_total_mb,
            "last_xid": last_xid,
            "xid_count": xid_count,
            "nvlink_domain": self._domains[index],
        }
        # The device's own readings from ``r``, the chip's from ``chip`` (the same handle
        # for a whole GPU; for a MIG device, its GPU's: see mig.py).
        r = _Reader(device.handle)
        chip = r.on(device.gpu_handle)
        try:
            memory = r.read("memory_used_mb", pynvml.nvmlDeviceGetMemoryInfo)
            util = r.read("utilization_pct", pynvml.nvmlDeviceGetUtilizationRates)
            temp = chip.read("temperature_c", pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU)
            power_mw = None if device.mig else chip.read("power_w", pynvml.nvmlDeviceGetPowerUsage)
            sm_clock = chip.read("sm_clock_mhz", pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM)
            reasons = chip.read("throttle_reasons", pynvml.nvmlDeviceGetCurrentClocksEventReasons)
            ecc_corrected = chip.read(
                "ecc_corrected_volatile",
                pynvml.nvmlDeviceGetTotalEccErrors,
                pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            )
            ecc_uncorrected = chip.read(
                "ecc_uncorrected_volatile",
                pynvml.nvmlDeviceGetTotalEccErrors,
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            )
            remap = chip.read("remap_failure", pynvml.nvmlDeviceGetRemappedRows)
            processes = r.read("pids", pynvml.nvmlDeviceGetComputeRunningProcesses) or []
        except GpuLost:
            return GpuSample(**base, lost=True)
        if device.mig:
            r.unsupported.append("power_w")  # the chip's: summed over its slices it would count it again
        if not self._xids.supported:
            r.unsupported.append("last_xid")
        if "utilization_pct" in r.unsupported:
            r.unsupported.append("memory_utilization_pct")  # both come from one NVML call
        if "remap_failure" in r.unsupported:
            r.unsupported.append("remapped_rows_pending")  # both come from one NVML call
        return GpuSample(
            **base,
            memory_used_mb=int(memory.used) // MIB if memory is not None else None,
            utilization_pct=float(util.gpu) if util is not None else None,
            memory_utilization_pct=float(util.memory) if util is not None else None,
            temperature_c=float(temp) if temp is not None else None,
            power_w=round(power_mw / 1000.0, 1) if power_mw is not None else None,
            sm_clock_mhz=int(sm_clock) if sm_clock is not None else None,
            throttle_reasons=throttle_reason_names(int(reasons)) if reasons is not None else None,
            ecc_corrected_volatile=int(ecc_corrected) if ecc_corrected is not None else None,
            ecc_uncorrected_volatile=int(ecc_uncorrected) if ecc_uncorrected is not None else None,
            # (corrected rows, uncorrected rows, is pending, failure occurred)
            remapped_rows_pending=bool(remap[2]) if remap is not None else None,
            remap_failure=bool(remap[3]) if remap is not None else None,
            pids=sorted(int(p.pid) for p in processes),
            unsupported=r.unsupported,
        )

    def close(self) -> None:
        self._xids.close()
        pynvml.nvmlShutdown()


def mig_enabled(backend: GpuBackend) -> bool:
    """Whether this node can share its GPUs by MIG: at least one of its GPUs is in MIG mode
    (with MIG devices or not yet). Simulated GPUs, and GPUs NVML cannot read, never are."""
    return isinstance(backend, NvmlGpus) and bool(backend.mig_gpus)
