"""Every task of a node in a sandbox of its own: who it runs as, what it sees, what it may use.

``Sandbox.prepare`` readies one task (its uid, its working directory, its cores, its
cgroup with the limits of its spec, the account files that give a dynamic uid a name
and a home: ``accounts.py``) and returns the command that starts it through the
helper (``corral_sandbox.c``: namespaces, mounts, dropped privileges).
``Sandbox.join_argv`` runs one more command inside a running task (an exec: the
helper's join mode, ``joining.py``). ``Sandbox.finish`` takes it down once its helper
has exited: whatever is left in its cgroup is killed, the cgroup removed, and the job's
uid released when no task of the job is left on this node.

``open_sandbox`` checks, once at the agent's start, that all of it works here: root,
the cgroup controllers, the helper (built and run once on ``/bin/true``). Each failure
is a ``SandboxProblem`` that names the file or permission and what to do.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import tempfile
from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from services.launcher.agent.sandbox.accounts import remove_account_files, write_account_files
from services.launcher.agent.sandbox.cgroups import CgroupProblem, CgroupTree, Limits, TaskCgroup, open_tree
from services.launcher.agent.sandbox.cpus import CpuPlacement, Topology, place_cpus
from services.launcher.agent.sandbox.gpus import cgroup_rule, task_gpus
from services.launcher.agent.sandbox.helper import HelperProblem, helper_binary
from services.launcher.agent.sandbox.identities import (
    AccountIdentities,
    DynamicIdentities,
    Identities,
    Identity,
    IdentityProblem,
)
from services.launcher.agent.sandbox.joining import RunningTask
from services.launcher.agent.sandbox.storage import Bind, storage_argv
from shared.jobs import Resources

MIB = 1024 * 1024


class SandboxProblem(Exception):
    """Tasks cannot be isolated on this node; the message says what is missing."""


@dataclass(frozen=True)
class SandboxConfig:
    node_id: str
    hidden: tuple[Path, ...]  # Corral's home, the agent's state, logs: empty inside a task
    claims_dir: Path
    uid_range: tuple[int, int]
    run_as: str  # "dynamic" or "account"
    pids_max: int
    writable: tuple[Path, ...] = ()  # host paths a task may write besides its own (shared data)
    readable: tuple[Path, ...] = ()  # host paths a task may read even inside a hidden or private one
    device_root: Path = Path("/dev")
    helper: Path | None = None
    cgroup_root: Path | None = None  # a v2 root other than /sys/fs/cgroup
    sysfs: Path = Path("/sys")


@dataclass(frozen=True)
class Launch:
    """What ``spawn`` runs, and what the task's environment gets from the sandbox."""

    argv: list[str]
    env: dict[str, str]
    cgroup: TaskCgroup
    identity: Identity
    cpus: CpuPlacement


@dataclass
class Sandbox:
    config: SandboxConfig
    tree: CgroupTree
    identities: Identities
    topology: Topology
    helper: Path
    _jobs: dict[str, set[str]] = field(default_factory=dict)  # job -> its attempts here
    _pid_files: dict[str, Path] = field(default_factory=dict)  # attempt -> its account files' place

    @property
    def description(self) -> str:
        first, last = self.config.uid_range
        who = (
            f"a dynamic uid of its own ({first}-{last})"
            if self.config.run_as == "dynamic"
            else "its submitter's account"
        )
        return (
            f"each task as {who}, in its own pid, mount and IPC namespaces, cgroup v{self.tree.version} "
            f"limits (memory, {self.config.pids_max} pids, cores), only its own GPUs"
        )

    def prepare(
        self,
        *,
        attempt_id: str,
        job_id: str,
        username: str,
        resources: Resources,
        gpu_indices: list[int],
        workdir: Path,
        log_path: Path,
        pid_file: Path,
        exit_file: Path,
        command: str,
        binds: Sequence[Bind] = (),
        shm_mb: int | None = None,
    ) -> Launch:
        """``binds``: the task's storage at /mnt/NAME; ``shm_mb``: its /dev/shm's size."""
        self._jobs.setdefault(job_id, set()).add(attempt_id)
        try:
            identity = self.identities.claim(job_id, username)
        except IdentityProblem:
            self.forget(job_id, attempt_id)
            raise
        workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chown(workdir, identity.uid, identity.gid)
        accounts: dict[str, Path] = {}
        if self.config.run_as == "dynamic":  # (an account's own uid is in the host's files)
            self._pid_files[attempt_id] = pid_file
            accounts = write_account_files(identity, workdir, pid_file)
        gpus = task_gpus(gpu_indices, self.config.device_root, gpu_numa=self.topology.gpu_nodes)
        placement = place_cpus(
            self.topology,
            resources.cpus,
            self.tree.busy_cpus(),
            gpu_numa_nodes=set(gpus.numa_nodes) or None,
            numa_required=resources.numa == "required",
        )
        limits = Limits(
            memory_bytes=resources.memory_mb * MIB,
            cpus=resources.cpus,
            cpuset_cpus=placement.cpuset,
            cpuset_mems=placement.mems_list,
            pids_max=self.config.pids_max,
            devices=tuple(cgroup_rule(node) for node in gpus.device_nodes),
        )
        cgroup = self.tree.create(attempt_id, limits)
        argv = [
            str(self.helper),
            *("--pid-file", str(pid_file), "--exit-file", str(exit_file), "--log", str(log_path)),
            *("--workdir", str(workdir), "--uid", str(identity.uid), "--gid", str(identity.gid)),
        ]
        for procs in cgroup.procs_files:
            argv += ["--cgroup-procs", str(procs)]
        for path in self.config.hidden:
            argv += ["--hide", str(path)]
        for node in gpus.device_nodes:
            argv += ["--device", str(node)]
        for path in self.config.writable:
            argv += ["--writable", str(path)]
        for path in self.config.readable:
            argv += ["--readable", str(path)]
        for flag, path in accounts.items():
            argv += [flag, str(path)]
        if self.tree.version == 2:  # no devices controller: device nodes work only in /dev
            argv.append("--nodev")
        argv += storage_argv(binds, shm_mb)
        argv += ["--", "/bin/sh", "-c", command]
        env = {
            "HOME": str(workdir),
            "USER": identity.name,
            "LOGNAME": identity.name,
            "TMPDIR": "/tmp",  # noqa: S108 - the task's own tmpfs
            "CUDA_VISIBLE_DEVICES": gpus.cuda_visible_devices,
            "OMP_NUM_THREADS": str(max(1, int(resources.cpus))),
            "CORRAL_CPUS": placement.cpuset,
        }
        return Launch(argv, env, cgroup, identity, placement)

    def join_argv(
        self, *, attempt_id: str, job_id: str, task: RunningTask, workdir: Path, command: list[str], tty: bool
    ) -> list[str]:
        """The helper's command that runs ``command`` inside the running ``task`` (its
        cgroups, namespaces, uid and working directory); ``--env-fd`` is the caller's.

        The identity is the one this node gave the job, and the task's command must be
        running as it: a mismatch is refused (``SandboxProblem``), never joined."""
        cgroup = self.tree.existing(attempt_id)
        if cgroup is None:
            raise SandboxProblem(f"attempt {attempt_id} has no cgroup on this node")
        held = self.identities.held().get(job_id)
        if held is not None and (held.uid, held.gid) != (task.uid, task.gid):
            raise SandboxProblem(
                f"attempt {attempt_id} runs as {task.uid}:{task.gid}, not as its job's {held.uid}:{held.gid}"
            )
        argv = [str(self.helper), "--join", str(task.init_pid)]
        argv += ["--uid", str(task.uid), "--gid", str(task.gid), "--workdir", str(workdir)]
        for procs in cgroup.procs_files:
            argv += ["--cgroup-procs", str(procs)]
        if tty:
            argv.append("--tty")
        return [*argv, "--", *command]

    def hold(self, job_id: str, attempt_id: str) -> None:
        """A task about to start: its job keeps its uid on this node (``release_unused``
        spares it) until the task is forgotten, while its start awaits (readying.py)."""
        self._jobs.setdefault(job_id, set()).add(attempt_id)

    def adopt(self, attempt_id: str, job_id: str) -> TaskCgroup | None:
        """A task an earlier agent started: its cgroup, found by the attempt's name."""
        self._jobs.setdefault(job_id, set()).add(attempt_id)
        return self.tree.existing(attempt_id)

    def cgroup_of(self, attempt_id: str) -> TaskCgroup | None:
        return self.tree.existing(attempt_id)

    def finish(self, attempt_id: str, job_id: str) -> bool:
        """``take_down`` then ``forget``. False while its processes are still exiting."""
        if not self.take_down(attempt_id):
            return False
        self.forget(job_id, attempt_id)
        return True

    def take_down(self, attempt_id: str) -> bool:
        """Kill what is left of the task and remove its cgroup; False while its
        processes are still exiting. Touches only the cgroup: safe in a worker thread."""
        cgroup = self.tree.existing(attempt_id)
        if cgroup is None:
            return True
        if cgroup.processes():  # (usually none: they went with the task's pid 1)
            cgroup.kill()
        return cgroup.remove()

    def forget_attempt(self, attempt_id: str) -> None:
        """``forget`` for an attempt found by its cgroup alone (the sweep's)."""
        for job_id, attempts in list(self._jobs.items()):
            if attempt_id in attempts:
                self.forget(job_id, attempt_id)

    def take_down_if_empty(self, attempt_id: str) -> bool:
        """Remove the task's cgroup if no process is left in it (two reads, no wait)."""
        cgroup = self.tree.existing(attempt_id)
        return cgroup is None or (not cgroup.processes() and cgroup.remove())

    def forget(self, job_id: str, attempt_id: str) -> None:
        """The task is gone: remove its account files, and release its job's uid if it
        was the job's last task here. Called on the agent's event loop, like
        ``prepare``, so a new task of the job never starts with a uid that is being
        released."""
        pid_file = self._pid_files.pop(attempt_id, None)
        if pid_file is not None:
            remove_account_files(pid_file)
        attempts = self._jobs.get(job_id)
        if attempts is not None:
            attempts.discard(attempt_id)
            if not attempts:
                del self._jobs[job_id]
                self.identities.release(job_id)

    def orphans(self, live: Container[str]) -> list[str]:
        """Task cgroups of this node whose attempts are not live (an earlier agent's)."""
        return [name for name in self.tree.names() if name not in live]

    def close(self) -> None:
        """On the agent's clean stop: give back what no task holds (tasks still running
        keep their cgroups and uids, for the next agent to re-adopt)."""
        self.release_unused()
        self.tree.close()

    def release_unused(self) -> None:
        """uids this node claimed before a restart for jobs with no task left here."""
        for job_id in list(self.identities.held()):
            if job_id not in self._jobs:
                self.identities.release(job_id)


# Replaced whole inside every sandbox: nothing under them needs hiding.
PRIVATE_IN_EVERY_SANDBOX = (Path("/dev"), Path("/tmp"), Path("/var/tmp"))  # noqa: S108


def needed_mounts(hidden: list[Path], readable: list[Path]) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """The hidden and readable paths that each need a mount of their own (each one is a
    mount per task): a hidden path inside another, or inside what every sandbox
    replaces, is hidden already; a readable path is mounted only where a task could not
    reach it otherwise (inside a hidden path or what every sandbox replaces, or below a
    directory others may not enter)."""
    unique = list(dict.fromkeys(hidden))
    kept_hidden = [
        path
        for path in unique
        if not any(path.is_relative_to(c) for c in PRIVATE_IN_EVERY_SANDBOX)
        and not any(path != other and path.is_relative_to(other) for other in unique)
    ]
    gone = [*kept_hidden, *PRIVATE_IN_EVERY_SANDBOX]
    kept_readable = [
        path
        for path in dict.fromkeys(readable)
        if any(path.is_relative_to(g) for g in gone) or not _others_may_reach(path)
    ]
    return tuple(kept_hidden), tuple(kept_readable)


def _others_may_reach(path: Path) -> bool:
    """Every directory from / to ``path`` lets others through (o+x)."""
    for directory in (path, *path.parents):
        try:
            if not directory.stat().st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


def open_sandbox(config: SandboxConfig) -> Sandbox:
    """This node's sandbox, checked end to end; ``SandboxProblem`` says what is missing."""
    if os.geteuid() != 0:
        raise SandboxProblem(
            f"the agent runs as uid {os.geteuid()}, not root: it cannot give tasks uids of their own, "
            "namespaces or cgroups; run it as root"
        )
    try:
        tree = open_tree(config.node_id, config.cgroup_root)
        first, last = config.uid_range
        identities: Identities = (
            DynamicIdentities(config.claims_dir, config.node_id, first, last)
            if config.run_as == "dynamic"
            else AccountIdentities()
        )
        helper = helper_binary(config.helper)
        topology = Topology.read(config.sysfs)
    except (CgroupProblem, IdentityProblem, HelperProblem) as exc:
        raise SandboxProblem(str(exc)) from exc
    except OSError as exc:
        raise SandboxProblem(f"{exc.filename}: {exc.strerror}") from exc
    _try_helper(helper)
    return Sandbox(config, tree, identities, topology, helper)


def _try_helper(helper: Path) -> None:
    """Run ``/bin/true`` through the helper once: namespaces, mounts and dropping
    privileges all work here, or the helper's message says which step did not."""
    with tempfile.TemporaryDirectory(prefix="corral-sandbox-check-") as scratch:
        root = Path(scratch)
        work = root / "work"
        work.mkdir()
        nobody = 65534
        os.chown(work, nobody, nobody)
        log = root / "log"
        done = subprocess.run(
            [
                str(helper),
                *("--pid-file", str(root / "pid"), "--exit-file", str(root / "exit"), "--log", str(log)),
                *("--workdir", str(work), "--uid", str(nobody), "--gid", str(nobody), "--", "/bin/true"),
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
            timeout=30,
        )
        if done.returncode != 0:
            said = ""
            with contextlib.suppress(OSError):
                said = log.read_text().strip()
            said = said or done.stderr.decode(errors="replace").strip()
            raise SandboxProblem(
                f"the task sandbox does not work on this machine: {said or done.returncode}. It needs "
                "root with CAP_SYS_ADMIN (in a container: a privileged one, or one whose seccomp "
                "profile allows unshare and mount), and Linux 5.12 or newer (mount_setattr)"
            )
