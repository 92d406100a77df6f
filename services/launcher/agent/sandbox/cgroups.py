"""Each task's control group: its limits, the one handle that kills all of it.

A task's processes all live in one cgroup (per controller on v1), made by the agent
before the task starts and joined by the sandbox helper before the task's first
instruction runs, so every process the task ever makes is in it, however it forks,
setsids or daemonises. Signalling and killing go through the cgroup, never through a
process group the task could leave.

Two layouts, the same interface (``CgroupTree``):

- **v1** (``CgroupV1``): one directory per controller, under
  ``<mount of controller>/corral/<node>/<attempt>``, for cpuset, cpu, memory, pids,
  devices and freezer. Killing freezes the freezer cgroup first, so nothing forks
  between reading the list of processes and killing them.
- **v2** (``CgroupV2``): one directory, ``<root>/corral/<node>/<attempt>``, with the
  controllers enabled in each parent's ``cgroup.subtree_control``; killing writes
  ``cgroup.kill``. v2 has no devices controller: the sandbox's private ``/dev`` (and a
  root mounted ``nodev``) restricts devices there.

Both take a ``root`` so tests can point them at a fake cgroupfs tree.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

CFS_PERIOD_US = 100_000
# How long another node's new task cgroup counts as in use before its task is in it (the
# task joins it as its helper starts, within milliseconds on an idle machine).
STARTING_GRACE_S = 5.0
V1_CONTROLLERS = ("cpuset", "cpu", "memory", "pids", "devices", "freezer")
V2_CONTROLLERS = ("cpuset", "cpu", "memory", "pids")
# Character devices every task may use: null, zero, full, random, urandom, tty, ptmx
# and the pseudo-terminals (what container runtimes allow by default).
STANDARD_DEVICES = ("c 1:3", "c 1:5", "c 1:7", "c 1:8", "c 1:9", "c 5:0", "c 5:2", "c 136:*")


class CgroupProblem(Exception):
    """This machine's cgroups cannot confine tasks; the message says which file and why."""


@dataclass(frozen=True)
class Limits:
    """What one task may use."""

    memory_bytes: int
    cpus: float  # CFS quota, in cores
    cpuset_cpus: str  # the cores it may run on ("2-3,6")
    cpuset_mems: str  # the NUMA nodes its memory comes from
    pids_max: int
    devices: tuple[str, ...] = ()  # extra character devices, "c 195:0"


@dataclass
class TaskCgroup:
    """One task's cgroup directories (one per controller on v1, one on v2)."""

    name: str
    directories: dict[str, Path]  # controller (or "unified") -> directory
    procs_dir: Path  # where its list of processes is read
    freezer: Path | None = None  # v1: freeze before killing
    kill_file: Path | None = None  # v2: cgroup.kill
    memory: Path | None = None
    on_removed: Callable[[], object] | None = field(default=None, repr=False)
    _removed: bool = field(default=False, repr=False)

    @property
    def procs_files(self) -> list[Path]:
        """What the sandbox helper writes the task's first pid into (one per directory)."""
        return [directory / "cgroup.procs" for directory in dict.fromkeys(self.directories.values())]

    def processes(self) -> list[int]:
        try:
            text = (self.procs_dir / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(pid) for pid in text.split()]

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to every process of the task."""
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL every process of the task, however it was started."""
        if self.kill_file is not None and self.kill_file.exists():
            _write(self.kill_file, "1")
            return
        if self.freezer is None:
            self.signal(signal.SIGKILL)
            return
        state = self.freezer / "freezer.state"
        try:
            _write(state, "FROZEN")
            deadline = time.monotonic() + 1.0
            while state.read_text().strip() != "FROZEN" and time.monotonic() < deadline:
                time.sleep(0.001)
            self.signal(signal.SIGKILL)
        finally:
            with contextlib.suppress(OSError):
                _write(state, "THAWED")

    def oom_kills(self) -> int:
        """How many processes of the task the kernel killed for exceeding its memory."""
        if self.memory is None:
            return 0
        for name, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
            with contextlib.suppress(OSError):
                for line in (self.memory / name).read_text().splitlines():
                    parts = line.split()
                    if len(parts) == 2 and parts[0] == key:
                        return int(parts[1])
        return 0

    def remove(self) -> bool:
        """Remove the directories; False while processes are still in them."""
        if self._removed:
            return True
        for directory in self.directories.values():
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno == errno.EBUSY:
                    return False
                raise
        self._removed = True
        if self.on_removed is not None:
            self.on_removed()
        return True


class CgroupTree(Protocol):
    version: int

    def create(self, name: str, limits: Limits) -> TaskCgroup: ...
    def existing(self, name: str) -> TaskCgroup | None: ...
    def names(self) -> list[str]: ...
    def busy_cpus(self) -> dict[int, int]: ...
    def close(self) -> None: ...


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def parse_cpu_list(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11] (the kernel's cpulist format)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def format_cpu_list(cpus: Iterable[int]) -> str:
    ordered = sorted(set(cpus))
    ranges: list[str] = []
    start = prev = None
    for cpu in [*ordered, None]:
        if cpu is not None and prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(ranges)


def _task_dirs(parent: Path) -> list[str]:
    """The task cgroups under a node's directory (its other entries are control files)."""
    try:
        with os.scandir(parent) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def _cpusets_in(parent: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for name in _task_dirs(parent):
        with contextlib.suppress(OSError):
            found[name] = (parent / name / "cpuset.cpus").read_text().strip()
    return found


def _busy_from(corral_root: Path, own: Path, own_tasks: dict[str, str]) -> dict[int, int]:
    """How many task cgroups of every node agent of this machine (simulated nodes share
    its cores) may run on each core: this node's from what it wrote (``own_tasks``: task
    -> its cpuset), the others' from their ``cpuset.cpus`` (``corral/<node>/<task>``).
    Only directories are followed (a cgroup directory holds dozens of control files).

    Another node's task cgroup counts while it holds a process, or while it is young
    enough that its task may still be on its way in: an agent killed outright leaves its
    tasks' empty cgroups behind, and those hold no core."""
    busy: dict[int, int] = {}
    for cpuset in own_tasks.values():
        for cpu in parse_cpu_list(cpuset):
            busy[cpu] = busy.get(cpu, 0) + 1
    now = time.time()
    with contextlib.suppress(OSError):
        for node in os.scandir(corral_root):
            if not node.is_dir(follow_symlinks=False) or node.path == str(own):
                continue
            with contextlib.suppress(OSError), os.scandir(node.path) as tasks:
                for task in tasks:
                    if not task.is_dir(follow_symlinks=False) or not _may_hold_cores(task, now):
                        continue
                    with contextlib.suppress(OSError, ValueError), open(f"{task.path}/cpuset.cpus") as cpus:
                        for cpu in parse_cpu_list(cpus.read()):
                            busy[cpu] = busy.get(cpu, 0) + 1
    return busy


def _may_hold_cores(task: os.DirEntry[str], now: float) -> bool:
    """Whether another node's task cgroup is in use: it holds a process, or it was made
    under ``STARTING_GRACE_S`` ago (its task not in it yet)."""
    try:
        if now - task.stat(follow_symlinks=False).st_mtime < STARTING_GRACE_S:
            return True
        with open(f"{task.path}/cgroup.procs") as procs:
            return bool(procs.read(1).strip())
    except OSError:
        return False


class CgroupV1:
    """Per-controller hierarchies (``mounts``: controller -> its mount point)."""

    version = 1

    def __init__(self, mounts: dict[str, Path], node_id: str) -> None:
        missing = [c for c in V1_CONTROLLERS if c not in mounts]
        if missing:
            raise CgroupProblem(
                f"the cgroup v1 controller(s) {', '.join(missing)} are not mounted "
                f"(found: {', '.join(sorted(mounts)) or 'none'}); mount them under /sys/fs/cgroup"
            )
        self._parents = {c: mounts[c] / "corral" / node_id for c in V1_CONTROLLERS}
        self._cpusets: dict[str, str] = {}  # this node's tasks' cores, as written
        for controller, parent in self._parents.items():
            _make_parent(parent, controller == "cpuset")
        self._cpusets.update(_cpusets_in(self._parents["cpuset"]))  # an earlier agent's tasks

    def create(self, name: str, limits: Limits) -> TaskCgroup:
        dirs = {c: parent / name for c, parent in self._parents.items()}
        for directory in dirs.values():
            directory.mkdir(exist_ok=True)
        _write(dirs["cpuset"] / "cpuset.cpus", limits.cpuset_cpus)
        _write(dirs["cpuset"] / "cpuset.mems", limits.cpuset_mems)
        self._cpusets[name] = limits.cpuset_cpus
        _write(dirs["cpu"] / "cpu.cfs_period_us", str(CFS_PERIOD_US))
        _write(dirs["cpu"] / "cpu.cfs_quota_us", str(max(1000, round(limits.cpus * CFS_PERIOD_US))))
        _write(dirs["memory"] / "memory.limit_in_bytes", str(limits.memory_bytes))
        swap = dirs["memory"] / "memory.memsw.limit_in_bytes"
        if swap.exists():  # memory and swap together: the limit is not dodged by swapping
            _write(swap, str(limits.memory_bytes))
        _write(dirs["pids"] / "pids.max", str(limits.pids_max))
        _write(dirs["devices"] / "devices.deny", "a")
        for device in (*STANDARD_DEVICES, *limits.devices):
            _write(dirs["devices"] / "devices.allow", f"{device} rwm")
        return self._handle(name, dirs)

    def _handle(self, name: str, dirs: dict[str, Path]) -> TaskCgroup:
        return TaskCgroup(
            name,
            dirs,
            dirs["freezer"],
            freezer=dirs["freezer"],
            memory=dirs["memory"],
            on_removed=lambda: self._cpusets.pop(name, None),
        )

    def existing(self, name: str) -> TaskCgroup | None:
        dirs = {c: parent / name for c, parent in self._parents.items()}
        if not dirs["freezer"].is_dir():
            return None
        return self._handle(name, dirs)

    def names(self) -> list[str]:
        return _task_dirs(self._parents["freezer"])

    def busy_cpus(self) -> dict[int, int]:
        return _busy_from(self._parents["cpuset"].parent, self._parents["cpuset"], self._cpusets)

    def close(self) -> None:
        """Remove this node's directories where no task is left in them."""
        for parent in self._parents.values():
            with contextlib.suppress(OSError):
                parent.rmdir()


class CgroupV2:
    """The unified hierarchy, rooted at ``root`` (``/sys/fs/cgroup``, or a delegated subtree)."""

    version = 2

    def __init__(self, root: Path, node_id: str) -> None:
        available = set((root / "cgroup.controllers").read_text().split()) if root.is_dir() else set()
        missing = [c for c in V2_CONTROLLERS if c not in available]
        if missing:
            raise CgroupProblem(
                f"{root / 'cgroup.controllers'} lacks the controller(s) {', '.join(missing)}: "
                "delegate them to this cgroup (systemd: Delegate=yes) or set CORRAL_AGENT_CGROUP_ROOT"
            )
        self._parent = root / "corral" / node_id
        self._cpusets: dict[str, str] = {}  # this node's tasks' cores, as written
        enable = " ".join(f"+{c}" for c in V2_CONTROLLERS)
        for directory in (root, root / "corral", self._parent):
            try:
                directory.mkdir(exist_ok=True)
                _enable(directory, enable)
            except OSError as exc:
                why = (
                    "a cgroup with processes of its own cannot hand controllers down: run the agent in "
                    "a cgroup of its own"
                    if exc.errno == errno.EBUSY
                    else "the agent needs write access to it"
                )
                raise CgroupProblem(
                    f"could not enable {enable} in {directory / 'cgroup.subtree_control'} ({exc.strerror}): "
                    f"{why}, or set CORRAL_AGENT_CGROUP_ROOT to a delegated cgroup"
                ) from exc
        self._cpusets.update(_cpusets_in(self._parent))  # an earlier agent's tasks

    def create(self, name: str, limits: Limits) -> TaskCgroup:
        directory = self._parent / name
        directory.mkdir(exist_ok=True)
        _write(directory / "cpuset.cpus", limits.cpuset_cpus)
        _write(directory / "cpuset.mems", limits.cpuset_mems)
        self._cpusets[name] = limits.cpuset_cpus
        _write(directory / "cpu.max", f"{max(1000, round(limits.cpus * CFS_PERIOD_US))} {CFS_PERIOD_US}")
        _write(directory / "memory.max", str(limits.memory_bytes))
        if (directory / "memory.swap.max").exists():
            _write(directory / "memory.swap.max", "0")
        _write(directory / "pids.max", str(limits.pids_max))
        return self._handle(name, directory)

    def _handle(self, name: str, directory: Path) -> TaskCgroup:
        return TaskCgroup(
            name,
            {"unified": directory},
            directory,
            kill_file=directory / "cgroup.kill",
            memory=directory,
            on_removed=lambda: self._cpusets.pop(name, None),
        )

    def existing(self, name: str) -> TaskCgroup | None:
        directory = self._parent / name
        return self._handle(name, directory) if directory.is_dir() else None

    def names(self) -> list[str]:
        return _task_dirs(self._parent)

    def busy_cpus(self) -> dict[int, int]:
        return _busy_from(self._parent.parent, self._parent, self._cpusets)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._parent.rmdir()


def _enable(directory: Path, controllers: str) -> None:
    """Hand ``controllers`` down from ``directory``. A container's cgroup root holds the
    container's own processes, and a cgroup with processes cannot hand controllers down
    (v2's no-internal-processes rule): there, they move to a leaf of their own first, as
    container entrypoints do (``<root>/corral-host``), and the agent's tasks go beside it."""
    try:
        _write(directory / "cgroup.subtree_control", controllers)
        return
    except OSError as exc:
        if exc.errno != errno.EBUSY or not (directory / "cgroup.controllers").exists():
            raise
    leaf = directory / "corral-host"
    leaf.mkdir(exist_ok=True)
    for _ in range(10):  # processes forked meanwhile land in the root: move them too
        pids = (directory / "cgroup.procs").read_text().split()
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, OSError):
                _write(leaf / "cgroup.procs", pid)
    _write(directory / "cgroup.subtree_control", controllers)


def _make_parent(parent: Path, is_cpuset: bool) -> None:
    """``corral/<node>`` under a v1 controller; a cpuset parent gets its parent's cores
    and memory nodes (v1 starts a new cpuset empty, and an empty one takes no tasks)."""
    for directory in (parent.parent, parent):
        try:
            directory.mkdir(exist_ok=True)
        except OSError as exc:
            raise CgroupProblem(
                f"could not make {directory} ({exc.strerror}): the agent needs write access"
            ) from exc
        if is_cpuset:
            for name in ("cpuset.cpus", "cpuset.mems"):
                if not (directory / name).read_text().strip():
                    _write(directory / name, (directory.parent / name).read_text().strip())


def cgroup_mounts(mounts_file: Path = Path("/proc/self/mounts")) -> tuple[Path | None, dict[str, Path]]:
    """This machine's cgroup v2 root when /sys/fs/cgroup is one, and its v1 controllers."""
    v2_root: Path | None = None
    v1: dict[str, Path] = {}
    for line in mounts_file.read_text().splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        target, fstype, options = Path(parts[1]), parts[2], parts[3].split(",")
        if fstype == "cgroup2" and target == Path("/sys/fs/cgroup"):
            v2_root = target
        elif fstype == "cgroup":
            for option in options:
                if option in V1_CONTROLLERS:
                    v1.setdefault(option, target)
    return v2_root, v1


def open_tree(node_id: str, v2_root: Path | None = None) -> CgroupTree:
    """The cgroup tree tasks of ``node_id`` go into; ``CgroupProblem`` says why not."""
    if v2_root is not None:
        return CgroupV2(v2_root, node_id)
    detected_v2, v1 = cgroup_mounts()
    if detected_v2 is not None:
        return CgroupV2(detected_v2, node_id)
    if not v1:
        raise CgroupProblem("no cgroup filesystem is mounted at /sys/fs/cgroup (see /proc/self/mounts)")
    return CgroupV1(v1, node_id)
