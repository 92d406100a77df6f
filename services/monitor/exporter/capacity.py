"""What a node offers tasks besides GPUs: CPU cores and memory.

Set by ``CORRAL_EXPORTER_CPUS`` / ``CORRAL_EXPORTER_MEMORY_MB`` when given. Otherwise a
node with real GPUs reports this machine's (the cores this process may run on, the
physical memory); a node of simulated GPUs reports nothing (0), because it stands for a
GPU server this development machine is not — limiting its tasks to these two cores would
make the simulation lie the other way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True)
class Capacity:
    cpus: float
    memory_mb: int


def node_capacity(cpus: float | None, memory_mb: int | None, *, simulated: bool) -> Capacity:
    return Capacity(
        cpus if cpus is not None else (0.0 if simulated else float(len(os.sched_getaffinity(0)))),
        memory_mb if memory_mb is not None else (0 if simulated else _physical_memory_mb()),
    )


def _physical_memory_mb() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MIB
    except (ValueError, OSError):
        return 0  # not known here: no memory limit rather than a wrong one
