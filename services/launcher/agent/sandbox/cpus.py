"""Which real cores, and which NUMA node's memory, a task runs on.

The machine's layout is read from sysfs (``Topology.read``): NUMA nodes and their
cores, each core's hyper-thread siblings, and each GPU's NUMA node. ``place_cpus``
then gives a task concrete cores the way the kubelet's static CPU manager with the
topology manager's ``single-numa-node`` policy does:

- a task with GPUs gets cores on the NUMA node of its GPUs, memory bound to that node;
- whole physical cores first (both hyper-threads), so two tasks never share a core's
  caches and execution units;
- a task gets ``ceil(cpus)`` cores that no other task runs on while there are free
  ones; its CFS quota (set with its cgroup) keeps a fraction to its share;
- when the aligned node has too few free cores: ``numa: preferred`` (the default) takes
  free cores elsewhere; ``numa: required`` shares cores on the aligned node instead of
  leaving it. When the machine has too few free cores at all (a simulated node
  advertising more CPUs than the machine has), tasks share the least-used cores and
  the placement says so. A task never gets more cores than it asked for.

Cores come from this machine, whatever a node advertises: a task's cpuset names cores
that exist.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from services.launcher.agent.sandbox.cgroups import format_cpu_list, parse_cpu_list


@dataclass(frozen=True)
class Topology:
    """NUMA node -> its cores; core -> its sibling hyper-threads (itself included)."""

    nodes: dict[int, tuple[int, ...]]
    siblings: dict[int, tuple[int, ...]]
    gpu_nodes: dict[str, int]  # PCI bus id (lower case) -> NUMA node

    @classmethod
    def read(cls, sysfs: Path = Path("/sys")) -> Topology:
        online = parse_cpu_list((sysfs / "devices/system/cpu/online").read_text())
        nodes: dict[int, tuple[int, ...]] = {}
        for node_dir in sorted((sysfs / "devices/system/node").glob("node[0-9]*")):
            cpus = tuple(c for c in parse_cpu_list((node_dir / "cpulist").read_text()) if c in online)
            if cpus:
                nodes[int(node_dir.name[4:])] = cpus
        if not nodes:  # a kernel without NUMA: one node of every core
            nodes = {0: tuple(online)}
        siblings: dict[int, tuple[int, ...]] = {}
        for cpu in online:
            path = sysfs / f"devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
            try:
                siblings[cpu] = tuple(c for c in parse_cpu_list(path.read_text()) if c in online)
            except OSError:
                siblings[cpu] = (cpu,)
        gpu_nodes: dict[str, int] = {}
        for device in (sysfs / "bus/pci/devices").glob("*"):
            try:
                if (device / "vendor").read_text().strip() != "0x10de":  # NVIDIA
                    continue
                node = int((device / "numa_node").read_text())
            except (OSError, ValueError):
                continue
            gpu_nodes[device.name.lower()] = max(node, 0)  # -1: no affinity, say node 0
        return cls(nodes, siblings, gpu_nodes)

    def node_of(self, cpu: int) -> int:
        return next(node for node, cpus in self.nodes.items() if cpu in cpus)

    @property
    def cpu_count(self) -> int:
        return sum(len(cpus) for cpus in self.nodes.values())


@dataclass(frozen=True)
class CpuPlacement:
    cpus: tuple[int, ...]
    mems: tuple[int, ...]
    exclusive: bool  # no other task may run on these cores
    aligned: bool  # on the NUMA node(s) of the task's GPUs (True when it has none)
    note: str = ""  # why it is shared or unaligned, said plainly

    @property
    def cpuset(self) -> str:
        return format_cpu_list(self.cpus)

    @property
    def mems_list(self) -> str:
        return format_cpu_list(self.mems)


def place_cpus(
    topology: Topology,
    cpus: float,
    busy: dict[int, int],
    *,
    gpu_numa_nodes: set[int] | None = None,
    numa_required: bool = False,
) -> CpuPlacement:
    """Cores for a task asking for ``cpus``; ``busy``: core -> tasks already on it."""
    want = min(max(1, math.ceil(cpus)), topology.cpu_count)
    exclusive = float(cpus).is_integer()
    home = sorted(gpu_numa_nodes or ()) or _roomiest(topology, busy)
    home_cpus = [c for node in home for c in topology.nodes.get(node, ())]
    free_home = _whole_cores_first(topology, [c for c in home_cpus if not busy.get(c)])
    if len(free_home) >= want:
        return _placement(topology, free_home[:want], exclusive, aligned=True)
    if not numa_required:
        elsewhere = [c for node in topology.nodes for c in topology.nodes[node] if c not in home_cpus]
        free = free_home + _whole_cores_first(topology, [c for c in elsewhere if not busy.get(c)])
        if len(free) >= want:
            aligned = not gpu_numa_nodes or set(free[:want]) <= set(home_cpus)
            note = "" if aligned else "not enough free cores on its GPUs' NUMA node: some are on another"
            return _placement(topology, free[:want], exclusive, aligned=aligned, note=note)
    pool = home_cpus if numa_required else [c for n in topology.nodes for c in topology.nodes[n]]
    least_used = sorted(pool, key=lambda c: (busy.get(c, 0), c))[:want]
    note = f"this machine has too few free cores: sharing {format_cpu_list(least_used)} with other tasks"
    aligned = not gpu_numa_nodes or set(least_used) <= set(home_cpus)
    return _placement(topology, least_used, False, aligned=aligned, note=note)


def _placement(
    topology: Topology, cpus: list[int], exclusive: bool, *, aligned: bool, note: str = ""
) -> CpuPlacement:
    chosen = tuple(sorted(cpus))
    mems = tuple(sorted({topology.node_of(c) for c in chosen}))
    return CpuPlacement(chosen, mems, exclusive, aligned, note)


def _roomiest(topology: Topology, busy: dict[int, int]) -> list[int]:
    """Without GPUs: the NUMA node with the most free cores (a task stays on one node)."""
    return [max(topology.nodes, key=lambda n: (sum(1 for c in topology.nodes[n] if not busy.get(c)), -n))]


def _whole_cores_first(topology: Topology, free: list[int]) -> list[int]:
    """Free cores ordered so whole physical cores (every sibling free) come first, a
    core's siblings together; half-used cores after them."""
    free_set = set(free)
    whole: list[int] = []
    partial: list[int] = []
    seen: set[int] = set()
    for cpu in sorted(free):
        if cpu in seen:
            continue
        group = topology.siblings.get(cpu, (cpu,))
        seen.update(group)
        members = [c for c in group if c in free_set]
        (whole if len(members) == len(group) else partial).extend(members)
    return whole + partial
