"""Fake sysfs and cgroupfs trees, labelled as such, for what this machine cannot show.

``machine`` writes the files the kernel keeps under /sys for a machine's CPUs, NUMA
nodes and NVIDIA GPUs; ``cgroup_v2_root`` writes a cgroup2 root whose controllers are
delegated. A fake cgroupfs does not make a group's files on mkdir as the kernel does,
so ``cgroup_v2_group`` makes them for a group the code under test will create.
"""

from __future__ import annotations

from pathlib import Path

from services.launcher.agent.sandbox.cgroups import format_cpu_list

V2_FILES = (
    "cgroup.procs",
    "cgroup.kill",
    "cgroup.subtree_control",
    "cpuset.cpus",
    "cpuset.mems",
    "cpu.max",
    "memory.max",
    "memory.swap.max",
    "memory.events",
    "pids.max",
)


def machine(
    root: Path, *, sockets: int, cores_per_socket: int, threads: int, gpus_per_socket: int = 0
) -> Path:
    """A fake /sys: CPUs numbered as Linux does (first threads of every core, then the
    siblings), one NUMA node per socket, GPUs spread over the sockets in bus order."""
    cpu_root = root / "devices/system/cpu"
    node_root = root / "devices/system/node"
    total_cores = sockets * cores_per_socket
    nodes: dict[int, list[int]] = {s: [] for s in range(sockets)}
    for thread in range(threads):
        for core in range(total_cores):
            cpu = thread * total_cores + core
            socket = core // cores_per_socket
            nodes[socket].append(cpu)
            siblings = [t * total_cores + core for t in range(threads)]
            topology = cpu_root / f"cpu{cpu}" / "topology"
            topology.mkdir(parents=True)
            (topology / "thread_siblings_list").write_text(format_cpu_list(siblings) + "\n")
    (cpu_root / "online").write_text(f"0-{total_cores * threads - 1}\n")
    for socket, cpus in nodes.items():
        (node_root / f"node{socket}").mkdir(parents=True)
        (node_root / f"node{socket}" / "cpulist").write_text(format_cpu_list(cpus) + "\n")
    for socket in range(sockets):
        for index in range(gpus_per_socket):
            device = root / "bus/pci/devices" / f"0000:{0x18 + socket * 0x80 + index:02x}:00.0"
            device.mkdir(parents=True)
            (device / "vendor").write_text("0x10de\n")
            (device / "numa_node").write_text(f"{socket}\n")
    return root


def cgroup_v2_root(root: Path, controllers: str = "cpuset cpu io memory pids") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


def cgroup_v2_group(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in V2_FILES:
        (directory / name).touch()
    (directory / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    return directory
