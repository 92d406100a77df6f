"""GPU sharing on a node: the pool's mode, what each mode puts in a sharer's environment,
and whether the node has what the mode needs.

A node's mode is one setting read by both of its processes, so they cannot disagree: the
exporter reports it (the scheduler places fractions of a GPU only on nodes that share),
and the agent sets each sharing task's environment by it and checks that the task keeps
to its share (``services/launcher/agent/gpu_share/watch.py``).

What each mode isolates, plainly (docs/gpu-sharing.md says the same to operators):

- ``timeslice``: the GPU's time-slicing only. Nothing stops a sharer from filling the
  GPU's memory or taking all its compute; the agent's per-process check is the only
  enforcement (it stops or warns about a task over its share, after the fact).
- ``mps``: NVIDIA's Multi-Process Service, its daemon run by the node's operator. A
  sharer's compute is capped (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``) and, with
  ``gpu_memory_mb``, its device memory (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``). Sharers
  share one MPS server: a fatal GPU fault in one client ends the others' work too.
- ``hami``: HAMi-core's ``libvgpu.so``, preloaded, caps memory and compute per process
  (``CUDA_DEVICE_MEMORY_LIMIT``, ``CUDA_DEVICE_SM_LIMIT``). It works by intercepting the
  CUDA driver API: a program that calls the driver without it (a static binary, its own
  loader) is not capped, which is why the agent still checks.
- ``mig``: hardware partitions with their own memory and compute; a MIG device is
  placed whole, as a GPU of its own type (``H100-1G.10GB``), so no fraction is asked.

A mode whose tool is missing is refused when the node starts, never faked
(``mode_refusal``): a pool that says ``mps`` without the MPS daemon would hand out
fractions that nothing enforces.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

SharingMode = Literal["none", "timeslice", "mps", "hami", "mig"]
SHARING_MODES: tuple[SharingMode, ...] = ("none", "timeslice", "mps", "hami", "mig")
# The modes that place fractions of a GPU; ``mig`` nodes offer their MIG devices whole.
FRACTION_MODES: frozenset[str] = frozenset({"timeslice", "mps", "hami"})
MPS_CONTROL = "nvidia-cuda-mps-control"


class GpuSharingSettings(BaseSettings):
    """How this node's GPUs are shared, read by its exporter and its agent alike."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_GPU_SHARING_", extra="ignore", use_attribute_docstrings=True
    )

    mode: SharingMode = Field(default="none", validation_alias=AliasChoices("CORRAL_GPU_SHARING"))
    """The node pool's sharing mode (``CORRAL_GPU_SHARING``): ``none``, ``timeslice``,
    ``mps``, ``hami`` or ``mig``. Tasks asking for a fraction of a GPU are placed only on
    nodes that share; what each mode isolates is in docs/gpu-sharing.md."""
    hami_library: Path = Path("/usr/local/vgpu/libvgpu.so")
    """HAMi-core's library, preloaded into sharing tasks in ``hami`` mode."""
    mps_pipe_dir: Path = Path("/run/nvidia-mps")
    """The MPS control daemon's pipe directory (``CUDA_MPS_PIPE_DIRECTORY``) in ``mps`` mode:
    outside ``/tmp``, which is each task's own."""
    over_limit: Literal["kill", "warn"] = "kill"
    """What the agent does about a sharing task that uses more GPU memory than its share:
    stop it (its attempt fails, classified ``gpu_over_limit``), or only raise the alert."""
    check_interval_s: float = Field(default=2.0, gt=0)
    """How often the agent reads each shared GPU's processes and their memory."""
    processes_file: Path | None = None
    """A stand-in for NVML's per-process readings on a machine without GPUs (simulated
    ones): a JSON file of each GPU's processes and the memory they use, which the agent
    reads instead (services/launcher/agent/gpu_share/processes.py). ``make up`` sets it
    to ``$CORRAL_HOME/gpu-processes-<node>.json`` for its simulated nodes."""


def share_memory_mb(milli: int, gpu_memory_mb: int | None, gpu_total_mb: int) -> int:
    """The GPU memory a share may use: what the task asked, else its fraction of the GPU's."""
    return gpu_memory_mb if gpu_memory_mb is not None else gpu_total_mb * milli // 1000


def share_environment(
    mode: SharingMode,
    settings: GpuSharingSettings,
    *,
    milli: int,
    memory_mb: int,
) -> dict[str, str]:
    """What a task holding a share (``milli`` thousandths of its one GPU, up to
    ``memory_mb`` of its memory) finds in its environment, by the node's mode. Every mode
    says the share (``CORRAL_GPU_SHARE``, ``CORRAL_GPU_MEMORY_MB``) so a framework can size
    itself; the mode's own variables are what enforce it."""
    percent = max(1, math.ceil(milli / 10))
    env = {
        "CORRAL_GPU_SHARING": mode,
        "CORRAL_GPU_SHARE": f"{milli / 1000:g}",
        "CORRAL_GPU_MEMORY_MB": str(memory_mb),
    }
    if mode == "mps":
        env["CUDA_MPS_PIPE_DIRECTORY"] = str(settings.mps_pipe_dir)
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(percent)
        # Indexed as the task sees its devices: its one GPU is device 0 to it.
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={memory_mb}M"
    elif mode == "hami":
        env["LD_PRELOAD"] = str(settings.hami_library)
        env["CUDA_DEVICE_MEMORY_LIMIT"] = f"{memory_mb}m"
        env["CUDA_DEVICE_SM_LIMIT"] = str(percent)
    return env


def mode_refusal(
    mode: SharingMode,
    settings: GpuSharingSettings,
    *,
    simulated: bool,
    mig_enabled: bool,
    gpu_types: Collection[str] = (),
    fault: str = "",
    which: Callable[[str], str | None] = shutil.which,
) -> str:
    """Why this node cannot share its GPUs in ``mode`` ("" when it can): the tool the mode
    relies on is missing, or the GPUs cannot do it. ``gpu_types``: the types of the GPUs
    the node reports (its MIG devices', in ``mig`` mode)."""
    if mig_enabled and mode != "mig":
        # A GPU in MIG mode is reported as its MIG devices, which only a mig pool offers.
        return (
            f"GPU sharing mode {mode}: GPUs of this node are in MIG mode, and are offered only as MIG "
            "devices; set CORRAL_GPU_SHARING=mig, or turn MIG off (nvidia-smi -mig 0, a GPU reset)"
        )
    if mode in ("none", "timeslice"):
        return ""
    fix = "set CORRAL_GPU_SHARING=timeslice (no enforcement but the agent's check) or none"
    if mode == "mps":
        if simulated:
            return f"GPU sharing mode mps: simulated GPUs have no MPS daemon; {fix}"
        if which(MPS_CONTROL) is None:
            return (
                f"GPU sharing mode mps: {MPS_CONTROL} is not on this node's PATH (NVIDIA's MPS "
                f"ships with the CUDA toolkit; its daemon must run as the node's operator); {fix}"
            )
        return ""
    if mode == "hami":
        if not settings.hami_library.is_file():
            return (
                f"GPU sharing mode hami: HAMi-core's library is not at {settings.hami_library} "
                f"(build it from Project-HAMi/HAMi-core, or set CORRAL_GPU_SHARING_HAMI_LIBRARY); {fix}"
            )
        return ""
    if not mig_enabled:
        why = "simulated GPUs have no MIG devices" if simulated else "no GPU of this node is in MIG mode"
        if fault:
            why = f"this node's GPUs cannot be read ({fault})"
        return (
            f"GPU sharing mode mig: {why} (enable it with nvidia-smi -mig 1, which needs a GPU reset, "
            f"and create the instances); {fix}"
        )
    if len(set(gpu_types)) > 1:
        # A node is of one GPU type to the scheduler, as NVIDIA's "single" MIG strategy has it.
        profiles = ", ".join(sorted(set(gpu_types)))
        return (
            f"GPU sharing mode mig: this node's MIG devices are of several profiles ({profiles}); "
            "a node offers one GPU type, so split every GPU of a node into the same profile"
        )
    return ""
