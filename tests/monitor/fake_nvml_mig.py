"""NVML on a GPU server whose GPUs may be split by MIG, for tests: an honest, labelled fake.

It stands for what cannot exist on a machine without NVIDIA GPUs: the answers of the
NVML library behind pynvml's functions. ``FakeNvml(gpus).install(monkeypatch)`` replaces
each pynvml function the exporter calls with one that answers from the scripted GPUs, in
pynvml's own return types (``c_nvmlMemory_t``, ``c_nvmlDeviceAttributes``, ...) and
raising pynvml's own errors. Only the functions named in ``FAKED`` are replaced; any other
would reach the real (absent) library and fail, so a call the fake does not know shows.

What it answers as NVML does on an Ampere or Hopper GPU (NVML API reference, NVIDIA's
MIG user guide):

- ``nvmlDeviceGetMigMode``: ``[current, pending]``, different while a change waits for a
  GPU reset; NotSupported on a GPU without MIG (``mig_capable=False``).
- In MIG mode, ``nvmlDeviceGetMigDeviceHandleByIndex`` answers up to
  ``nvmlDeviceGetMaxMigDeviceCount`` (7) slots, NOT_FOUND for an empty one. A MIG
  device's UUID is ``MIG-...``; its name is ``<GPU's name> MIG <profile>``; its memory and
  attributes are its GPU instance's. On a MIG device, utilization, temperature, power,
  clocks, throttle reasons, ECC and remapped rows answer NotSupported (they are the
  chip's), and its processes are its own.
- A GPU in MIG mode answers NotSupported for utilization (NVML has none in MIG mode);
  its other readings are the chip's.
- A lost GPU (``lost=True``) answers GPU_IS_LOST to every call, on it and on its MIG devices.

Scriptable: any function name in a device's ``unsupported`` answers NotSupported for it
(e.g. ``nvmlDeviceGetName`` on a MIG device, as a driver that names no profile would),
and ``xid(gpu, code)`` delivers an Xid event as the driver's event set does.
"""

from __future__ import annotations

import queue
import uuid as uuidlib
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

MIB = 1024 * 1024
H100 = "NVIDIA H100 80GB HBM3"
H100_MEMORY_MB = 81559
MAX_MIG_DEVICES = 7

# H100 80GB profiles: (GPU instance slices, memory MiB), as `nvidia-smi mig -lgip` lists them.
H100_PROFILES = {
    "1g.10gb": (1, 9984),
    "1g.20gb": (1, 20096),
    "2g.20gb": (2, 20096),
    "3g.40gb": (3, 40448),
    "4g.40gb": (4, 40448),
    "7g.80gb": (7, 80896),
}


def _uuid(prefix: str) -> str:
    return f"{prefix}-{uuidlib.uuid4()}"


@dataclass
class FakeMig:
    """One MIG device: a GPU instance (``profile``), or a compute instance of one
    (``compute_slices`` below its GPU instance's slices, e.g. ``1c.3g.40gb``)."""

    profile: str
    compute_slices: int | None = None
    pids: list[int] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    uuid: str = field(default_factory=lambda: _uuid("MIG"))

    @property
    def slices(self) -> int:
        return H100_PROFILES[self.profile][0]

    @property
    def memory_mb(self) -> int:
        return H100_PROFILES[self.profile][1]

    @property
    def name_profile(self) -> str:
        c = self.compute_slices
        return self.profile if c in (None, self.slices) else f"{c}c.{self.profile}"


@dataclass
class FakeGpu:
    """One physical H100. ``migs``: its MIG device slots in NVML's order (``None``: empty)."""

    mig_current: bool = False
    mig_pending: bool | None = None  # None: the same as current
    migs: list[FakeMig | None] = field(default_factory=list)
    mig_capable: bool = True
    lost: bool = False
    name: str = H100
    memory_mb: int = H100_MEMORY_MB
    used_mb: int = 1024
    temperature_c: int = 41
    power_mw: int = 118_000
    ecc_uncorrected: int = 0
    pids: list[int] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    uuid: str = field(default_factory=lambda: _uuid("GPU"))


@dataclass(eq=False)
class FakeHandle:
    """What pynvml's ``c_nvmlDevice_t`` stands for: a GPU, or one of its MIG devices."""

    gpu: FakeGpu
    mig: FakeMig | None = None


FAKED = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetP2PStatus",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetAttributes",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
)
# Readings NVML keeps per chip: NotSupported on a MIG device.
CHIP_ONLY = {
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
}


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # pynvml maps the code to its subclass (NVMLError_NotSupported, ...)


class FakeNvml:
    """The scripted GPUs, answering through pynvml's functions once installed."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self._handles = [FakeHandle(g) for g in gpus]
        self._mig_handles: dict[tuple[int, int], FakeHandle] = {}
        self._events: queue.Queue[SimpleNamespace] = queue.Queue()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
        for name in FAKED:
            monkeypatch.setattr(pynvml, name, getattr(self, name))
        return self

    def xid(self, gpu: int, code: int) -> None:
        """The driver reports Xid ``code`` on physical GPU ``gpu``."""
        self._events.put(SimpleNamespace(device=self._handles[gpu], eventData=code))

    # --- what every device call does first --------------------------------------

    def _check(self, handle: FakeHandle, call: str) -> None:
        if handle.gpu.lost:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        device = handle.mig or handle.gpu
        if call in device.unsupported or (handle.mig is not None and call in CHIP_ONLY):
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if handle.mig is None and handle.gpu.mig_current and call == "nvmlDeviceGetUtilizationRates":
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    # --- the library ------------------------------------------------------------

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        if not 0 <= index < len(self._handles):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._handles[index]

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        self._check(handle, "nvmlDeviceGetUUID")
        return (handle.mig or handle.gpu).uuid

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        self._check(handle, "nvmlDeviceGetName")
        return handle.gpu.name if handle.mig is None else f"{handle.gpu.name} MIG {handle.mig.name_profile}"

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> pynvml.c_nvmlMemory_t:
        self._check(handle, "nvmlDeviceGetMemoryInfo")
        total = (handle.mig.memory_mb if handle.mig else handle.gpu.memory_mb) * MIB
        used = (64 if handle.mig else handle.gpu.used_mb) * MIB
        return pynvml.c_nvmlMemory_t(total, total - used, used)

    def nvmlDeviceGetP2PStatus(self, a: FakeHandle, b: FakeHandle, _caps: int) -> int:
        # One NVSwitch board: every pair of whole GPUs talks over NVLink.
        self._check(a, "nvmlDeviceGetP2PStatus")
        self._check(b, "nvmlDeviceGetP2PStatus")
        whole = not (a.mig or b.mig or a.gpu.mig_current or b.gpu.mig_current)
        return int(pynvml.NVML_P2P_STATUS_OK if whole else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED)

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        self._check(handle, "nvmlDeviceGetMigMode")
        if not handle.gpu.mig_capable or handle.mig is not None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        current = handle.gpu.mig_current
        pending = current if handle.gpu.mig_pending is None else handle.gpu.mig_pending
        return [int(current), int(pending)]  # NVML_DEVICE_MIG_ENABLE is 1, DISABLE 0

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        self._check(handle, "nvmlDeviceGetMaxMigDeviceCount")
        if not handle.gpu.mig_capable:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return MAX_MIG_DEVICES if handle.gpu.mig_current else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, index: int) -> FakeHandle:
        self._check(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        if not handle.gpu.mig_current or not 0 <= index < MAX_MIG_DEVICES:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        mig = handle.gpu.migs[index] if index < len(handle.gpu.migs) else None
        if mig is None:
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        key = (self.gpus.index(handle.gpu), index)
        return self._mig_handles.setdefault(key, FakeHandle(handle.gpu, mig))

    def nvmlDeviceGetAttributes(self, handle: FakeHandle) -> pynvml.c_nvmlDeviceAttributes:
        self._check(handle, "nvmlDeviceGetAttributes")
        attributes = pynvml.c_nvmlDeviceAttributes()
        mig = handle.mig
        slices = mig.slices if mig else 7
        attributes.multiprocessorCount = 16 * slices if mig else 132
        attributes.gpuInstanceSliceCount = slices
        attributes.computeInstanceSliceCount = (mig.compute_slices or slices) if mig else slices
        attributes.memorySizeMB = mig.memory_mb if mig else handle.gpu.memory_mb
        return attributes

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> pynvml.c_nvmlUtilization_t:
        self._check(handle, "nvmlDeviceGetUtilizationRates")
        return pynvml.c_nvmlUtilization_t(37, 12)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, _sensor: int) -> int:
        self._check(handle, "nvmlDeviceGetTemperature")
        return handle.gpu.temperature_c

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        self._check(handle, "nvmlDeviceGetPowerUsage")
        return handle.gpu.power_mw

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, _clock: int) -> int:
        self._check(handle, "nvmlDeviceGetClockInfo")
        return 1980

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        self._check(handle, "nvmlDeviceGetCurrentClocksEventReasons")
        return 0

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, error_type: int, _counter: int) -> int:
        self._check(handle, "nvmlDeviceGetTotalEccErrors")
        return handle.gpu.ecc_uncorrected if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else 0

    def nvmlDeviceGetRemappedRows(self, handle: FakeHandle) -> tuple[int, int, int, int]:
        self._check(handle, "nvmlDeviceGetRemappedRows")
        return (0, 0, 0, 0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[Any]:
        self._check(handle, "nvmlDeviceGetComputeRunningProcesses")
        if handle.mig is not None:
            pids = handle.mig.pids
        else:  # the GPU's: its own, and in MIG mode every MIG device's
            pids = handle.gpu.pids + [p for m in handle.gpu.migs if m for p in m.pids]
        return [pynvml.nvmlStructToFriendlyObject(pynvml.c_nvmlProcessInfo_v2_t(p, 0, 0, 0)) for p in pids]

    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, _event_types: int, _event_set: object) -> None:
        self._check(handle, "nvmlDeviceRegisterEvents")

    def nvmlEventSetWait_v2(self, _event_set: object, timeout_ms: int) -> SimpleNamespace:
        try:
            return self._events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise _error(pynvml.NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetFree(self, event_set: object) -> None:
        pass


def balanced_h100() -> FakeGpu:
    """An H100 split as NVIDIA's MIG manager's ``all-balanced`` does: two 1g.10gb, one
    2g.20gb, one 3g.40gb (7 compute slices, 8 memory eighths), slots 4-6 empty."""
    return FakeGpu(
        mig_current=True,
        migs=[FakeMig("1g.10gb"), FakeMig("1g.10gb"), FakeMig("2g.20gb"), FakeMig("3g.40gb")],
    )
