"""Which GPUs the node reports: whole GPUs, and the MIG devices of GPUs in MIG mode.

A GPU in MIG mode is split into MIG devices (an H100 into up to seven: ``1g.10gb``,
``3g.40gb``, ...), each with its own compute slices, memory and UUID (``MIG-...``). The
node reports each MIG device in place of its GPU, as a GPU of its own type: its model is
the GPU's, then ``MIG`` and the profile (``NVIDIA H100 80GB HBM3 MIG 1g.10gb``, type
``H100-1G.10GB``, ``shared/gpu_types.py``), so a job asks for a slice like any GPU type
and the scheduler places whole slices.

**Indices.** The node's GPU indices are consecutive over what it reports, in NVML's
order: GPU 0's MIG devices, then GPU 1 (or its MIG devices), and so on. A node whose GPU 0
is split in three and whose GPU 1 is whole reports 0, 1, 2 (the slices) and 3 (GPU 1).
Such an index names neither a CUDA ordinal nor ``/dev/nvidia<N>``: a task on a MIG device
is given it by UUID, ``CUDA_VISIBLE_DEVICES=MIG-<uuid>`` (the sample's ``uuid``), which
CUDA accepts in place of an ordinal. CUDA shows a process one MIG device at most and no
whole GPU beside it (NVIDIA's MIG user guide), so a task process gets one slice and nothing
else. MIG devices that are compute instances of one GPU instance (``1c.3g.40gb``) share
its memory, and each reports all of it.

**Readings.** What NVML answers on the MIG device itself is read there: its memory and
its processes. Utilization has no reading in MIG mode (NVML answers NotSupported), so it
is ``None``. The chip's own state (temperature, clocks, throttling, ECC, remapped rows,
Xid events, a GPU fallen off the bus) is read from the GPU and reported on each of its
MIG devices, because every slice runs on that chip and a failing chip fails every slice.
Power is the chip's too, but is left out (``power_w`` unsupported): summed over slices it
would count the chip once per slice.

**Mode changes and layout.** MIG mode takes effect at a GPU reset: a GPU whose mode is
pending is reported as it is now (whole, or its MIG devices), with a warning naming the
reset. The layout is read when the backend opens: a MIG device created or destroyed later
is seen when the exporter restarts (list the exporter among the GPU clients that NVIDIA's
MIG manager stops and starts around a reconfiguration).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pynvml

from shared.gpu_types import mig_profile_of

log = logging.getLogger(__name__)

MIB = 1024 * 1024
GIB = 1024 * MIB


class MigUnreadable(Exception):
    """A GPU in MIG mode whose MIG devices NVML cannot list."""


@dataclass(frozen=True, slots=True)
class ReportedGpu:
    """One GPU as the node reports it: a whole GPU, or one MIG device of a GPU in MIG mode."""

    handle: object  # asked for the device's own readings
    gpu: int  # NVML index of the physical GPU: Xid events, NVLink, the chip's readings
    gpu_handle: object
    mig: bool = False


@dataclass(frozen=True, slots=True)
class Layout:
    devices: list[ReportedGpu]
    mig_gpus: tuple[int, ...]  # physical GPUs in MIG mode, with or without MIG devices


def read_layout(handles: list[object]) -> Layout:
    """Every GPU's MIG mode, and the devices the node reports for them (module docstring)."""
    devices: list[ReportedGpu] = []
    mig_gpus: list[int] = []
    for index, handle in enumerate(handles):
        if not _in_mig_mode(index, handle):
            devices.append(ReportedGpu(handle, index, handle))
            continue
        mig_gpus.append(index)
        slices = _mig_handles(index, handle)
        if not slices:
            log.warning(
                "GPU %d is in MIG mode with no MIG devices: it takes no work until they are created "
                "(nvidia-smi mig -i %d -cgi <profiles> -C)",
                index,
                index,
            )
        devices += [ReportedGpu(mig, index, handle, mig=True) for mig in slices]
    return Layout(devices, tuple(mig_gpus))


def _in_mig_mode(index: int, handle: object) -> bool:
    """The GPU's current MIG mode; a GPU without MIG (before Ampere, consumer cards) is whole."""
    try:
        current, pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError as exc:
        if exc.value != pynvml.NVML_ERROR_NOT_SUPPORTED:
            log.warning("GPU %d: NVML could not read its MIG mode (%s); reported whole", index, exc)
        return False
    enabled = bool(current == pynvml.NVML_DEVICE_MIG_ENABLE)
    if pending != current:
        log.warning(
            "GPU %d: MIG mode %s is pending a GPU reset (nvidia-smi -r -i %d); until then it is reported %s",
            index,
            "disabled" if enabled else "enabled",
            index,
            "as its MIG devices" if enabled else "whole",
        )
    return enabled


def _mig_handles(index: int, handle: object) -> list[object]:
    """The MIG devices of a GPU in MIG mode: NVML numbers slots up to a maximum, and a slot
    with no MIG device in it answers NOT_FOUND.

    Any other error fails the backend (the node then reports NVML's error and takes no
    work until NVML answers): reporting such a GPU whole would offer whole-GPU work on a
    GPU that CUDA can only use by its MIG devices."""
    found = []
    try:
        for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                found.append(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
            except pynvml.NVMLError as exc:
                if exc.value != pynvml.NVML_ERROR_NOT_FOUND:
                    raise
    except pynvml.NVMLError as exc:
        raise MigUnreadable(
            f"GPU {index} is in MIG mode and NVML cannot list its MIG devices: {exc}"
        ) from exc
    return found


def mig_model(gpu_model: str, mig_handle: object, gpu_memory_bytes: int) -> str:
    """``<GPU's model> MIG <profile>``. The profile is the one NVML names the MIG device by
    (drivers answer ``NVIDIA H100 80GB HBM3 MIG 1g.10gb``); where its name carries none, it
    is worked out from the device's slices and memory, as NVIDIA's tools name profiles."""
    try:
        profile = mig_profile_of(str(pynvml.nvmlDeviceGetName(mig_handle)))
    except pynvml.NVMLError:
        profile = None
    if profile is None:
        attributes = pynvml.nvmlDeviceGetAttributes(mig_handle)
        profile = profile_from_attributes(
            int(attributes.gpuInstanceSliceCount),
            int(attributes.computeInstanceSliceCount),
            int(attributes.memorySizeMB),
            gpu_memory_bytes,
        )
    return f"{gpu_model} MIG {profile}"


def profile_from_attributes(
    gpu_slices: int, compute_slices: int, memory_mb: int, gpu_memory_bytes: int
) -> str:
    """``1g.10gb`` for a one-slice device with an eighth of an 80 GB GPU's memory.

    The memory figure is the device's share of its GPU's memory rounded up to eighths (MIG
    hands out memory in eighths), times the GPU's memory in whole GB rounded up: a slice
    of 9,984 MiB on an H100 of 81,559 MiB is 1/8 of 80 GB, ``10gb``. A compute instance
    smaller than its GPU instance is named first (``1c.3g.40gb``). Attributes such as
    ``+me`` cannot be told from these figures; drivers name them in the device's name."""
    gb = -(-gpu_memory_bytes // GIB)
    eighths = -(-memory_mb * MIB * 8 // gpu_memory_bytes) if gpu_memory_bytes else 0
    memory_gb = (eighths * gb * 2 + 8) // 16  # eighths * gb / 8, halves rounded up
    profile = f"{gpu_slices}g.{memory_gb}gb"
    return profile if compute_slices in (0, gpu_slices) else f"{compute_slices}c.{profile}"
