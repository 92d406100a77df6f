"""A task's GPUs as this machine names them: device nodes, UUIDs, NUMA nodes.

Corral's GPU index is NVML's, which counts NVIDIA devices in PCI bus order. The driver
describes each under ``/proc/driver/nvidia/gpus/<bus id>/information`` (its UUID and
its device minor: ``/dev/nvidia<minor>``). ``CUDA_VISIBLE_DEVICES`` is given as UUIDs:
inside the sandbox only the task's own device nodes exist, so CUDA numbers them from 0
and a host index would name the wrong GPU or none. Where the driver says nothing (no
NVIDIA driver: simulated GPUs, or the fake device nodes of tests), the index is the
minor and ``CUDA_VISIBLE_DEVICES`` keeps indices.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

# The driver's control nodes every GPU task needs, when the machine has them.
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


@dataclass(frozen=True)
class TaskGpus:
    device_nodes: tuple[Path, ...]  # what the task's private /dev holds (and the device cgroup allows)
    cuda_visible_devices: str
    numa_nodes: frozenset[int]


def _driver_gpus(driver_dir: Path) -> list[tuple[str, str | None, int | None]]:
    """(bus id, UUID, minor) of every GPU the driver knows, in bus order."""
    gpus: list[tuple[str, str | None, int | None]] = []
    for gpu in sorted(driver_dir.glob("*"), key=lambda p: p.name.lower()):
        fields: dict[str, str] = {}
        with contextlib.suppress(OSError):
            for line in (gpu / "information").read_text().splitlines():
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
        minor = fields.get("Device Minor")
        gpus.append(
            (gpu.name.lower(), fields.get("GPU UUID"), int(minor) if minor and minor.isdigit() else None)
        )
    return gpus


def task_gpus(
    indices: list[int],
    device_root: Path = Path("/dev"),
    driver_dir: Path = Path("/proc/driver/nvidia/gpus"),
    gpu_numa: dict[str, int] | None = None,
) -> TaskGpus:
    known = _driver_gpus(driver_dir)
    nodes: list[Path] = []
    uuids: list[str] = []
    numa: set[int] = set()
    for index in indices:
        bus_id, uuid, minor = known[index] if index < len(known) else (None, None, None)
        node = device_root / f"nvidia{minor if minor is not None else index}"
        if _is_char_device(node):
            nodes.append(node)
        uuids.append(uuid or str(index))
        if bus_id is not None and gpu_numa and bus_id in gpu_numa:
            numa.add(gpu_numa[bus_id])
    if nodes:
        nodes.extend(n for name in CONTROL_NODES if _is_char_device(n := device_root / name))
    return TaskGpus(tuple(nodes), ",".join(uuids), frozenset(numa))


def _is_char_device(path: Path) -> bool:
    try:
        return stat.S_ISCHR(path.stat().st_mode)
    except OSError:
        return False


def cgroup_rule(node: Path) -> str:
    """The device cgroup (v1) rule that allows ``node``: ``c <major>:<minor>``."""
    device = node.stat().st_rdev
    return f"c {os.major(device)}:{os.minor(device)}"
