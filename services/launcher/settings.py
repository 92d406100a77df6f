"""Launcher and node-agent settings: ``CORRAL_LAUNCHER_*``, ``CORRAL_AGENT_*``."""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import stat
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.launcher.kubernetes.settings import KubernetesSettings
from services.launcher.shards import Shard
from shared.artifacts.settings import ArtifactSettings
from shared.settings import CommonSettings

# Where a node agent keeps its tasks' pid and exit files by default (see ``state_dir``).
SHARED_MEMORY = Path("/dev/shm")  # noqa: S108 - a private directory in it, checked (_private_dir)


class LauncherSettings(BaseSettings):
    """The launcher: which driver runs tasks, and its repair loop."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_LAUNCHER_", extra="ignore", use_attribute_docstrings=True
    )

    reconcile_interval_s: float = Field(default=5.0, gt=0)
    """The launcher's repair loop: nodes whose agent's lease ran out, placed jobs without
    attempts, jobs whose attempts all ended (and, with the Kubernetes driver, pods against
    attempts)."""
    driver: Literal["local", "kubernetes"] = "local"
    """``local``: node agents run tasks as processes (one agent per machine, ``make up``);
    ``kubernetes``: the launcher runs them as Pods (services/launcher/kubernetes/runner.py,
    the ``CORRAL_KUBERNETES_*`` settings; in-cluster credentials, else ``KUBECONFIG``)."""
    decide_concurrency: int = Field(default=4, ge=1)
    """How many jobs whose attempt ended on a node the launcher decides at once
    (attempt_ends.py); each holds a pooled connection while it decides."""
    placement_concurrency: int = Field(default=4, ge=1)
    """How many placements (``job.scheduled``) the launcher turns into attempts at once,
    each in its own transaction on a pooled connection; placements sharing a node take
    turns (attempts.py). 1: one after another."""
    processes: int = Field(default=1, ge=1, le=16)
    """How many launcher processes share the work (``make up`` sets it from
    ``CORRAL_LAUNCHER_PROCESSES``): they share the event consumer, and each decides the
    ended attempts of its share of the jobs (shards.py)."""
    process_index: int = Field(default=0, ge=0)
    """Which of them this process is, from 0; launcher 0 also runs the Kubernetes runner."""

    @model_validator(mode="after")
    def _index_within_processes(self) -> LauncherSettings:
        if self.process_index >= self.processes:
            raise ValueError(
                f"CORRAL_LAUNCHER_PROCESS_INDEX is {self.process_index}, but there are only"
                f" {self.processes} launcher processes (CORRAL_LAUNCHER_PROCESSES):"
                f" use 0 to {self.processes - 1}"
            )
        return self

    @property
    def shard(self) -> Shard:
        return Shard(self.process_index, self.processes)


class AgentSettings(BaseSettings):
    """The node agent (``services.launcher.agent``, one per machine): who it is, where its
    tasks' files go, and how it isolates them (services/launcher/agent/sandbox)."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_AGENT_", extra="ignore", use_attribute_docstrings=True
    )

    node_id: str = Field(default_factory=socket.gethostname, pattern=r"^[A-Za-z0-9_-]{1,63}$")
    """The node this agent serves: the id its exporter registers under."""
    node_secret_file: Path | None = None
    """The node's secret, which the database checks before the agent may act for the node
    (shared/db/credentials.py): a file only the agent's user may read (0600). Never in the
    environment or argv, and never passed to a task. Unset: the agent connects as the
    database's owner (tests, tools), which needs no secret."""
    log_dir: Path | None = None
    """Where per-attempt task logs are written. Unset: ``$CORRAL_HOME/logs``."""
    log_retention_hours: float = Field(default=168.0, ge=0)
    """How long a task's log is kept on its node once its attempt has ended (the node's
    disk is its only copy; log_retention.py); 0 keeps it for ever. The Kubernetes runner's
    logs follow it too."""
    state_dir: Path | None = None
    """Where the tasks' pid and exit files are kept, which let a restarted agent re-adopt
    its tasks. Unset: a private directory in shared memory (``/dev/shm``), else
    ``$CORRAL_HOME/agent/<node>``; a clean stop removes it where empty."""
    work_dir: Path | None = None
    """Where jobs' working directories are made. Unset: ``$CORRAL_HOME/work``. Simulated
    nodes sharing one home get one each: a job's tasks on two nodes run as two uids."""
    reconcile_interval_s: float = Field(default=2.0, gt=0)
    """The agent's repair loop: re-adopting live tasks, settling ones that ended while it
    was away, stopping what should not run."""
    stop_grace_s: float = Field(default=10.0, ge=0)
    """SIGTERM to SIGKILL grace when the agent itself stops a task."""
    lease_s: float = Field(default=15.0, gt=0)
    """The agent renews its node's lease every third of this; a node whose agent has been
    silent this long is declared lost and its tasks are retried elsewhere."""
    allow_unisolated: bool = False
    """A root agent runs every task in a sandbox; an agent that cannot (not root, no
    cgroups) refuses to start unless this lets it run tasks as its own user, unisolated
    (its node then shows ``isolation: none``). ``make up`` as an ordinary user sets it."""
    run_as: Literal["dynamic", "account"] = "dynamic"
    """Whose uid a task runs as. ``dynamic``: a uid of its own per job and node, from
    ``uid_range`` (systemd's DynamicUser); ``account``: the submitter's own POSIX account
    (Slurm's model; uids must agree across nodes)."""
    uid_range: str = Field(default="2130706432-2130771967", pattern=r"^[1-9][0-9]*-[1-9][0-9]*$")
    """The uids ``dynamic`` hands out, ``first-last``. The default, 0x7F000000-0x7F00FFFF, is
    where systemd's list of uid ranges (UIDS-GIDS.md) has nothing: above its containers'
    (0x80000-0x6FFFFFFF) and clear of its own DynamicUser range (61184-65519), whose uids
    its services may hold."""
    pids_max: int = Field(default=4096, ge=16)
    """Processes (and threads) a task may have at once."""
    writable_paths: str = ""
    """Host directories tasks may write besides their own (shared datasets, checkpoints),
    colon-separated. Everything else of the host is read-only to a task."""
    readable_paths: str = ""
    """Host directories tasks may read even where a parent is private or hidden (an
    interpreter installed in root's home, a checkout in a private directory): each is
    shown read-only at its own path. Colon-separated; ``make up`` adds its Python and
    checkout."""
    sandbox_helper: Path | None = None
    """A prebuilt ``corral-sandbox`` helper. Unset: built with ``cc`` into
    ``/var/lib/corral/sandbox-<hash>/``."""
    cgroup_root: Path | None = None
    """A delegated cgroup v2 subtree for the tasks. Unset: ``/sys/fs/cgroup``."""
    device_root: Path = Path("/dev")
    """Where the GPUs' device nodes are."""
    uid_claims_dir: Path = Path("/run/corral/uids")
    """Where the uids handed to jobs are claimed: one directory for every agent of the
    machine."""

    @property
    def uid_bounds(self) -> tuple[int, int]:
        first, last = self.uid_range.split("-")
        return int(first), int(last)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
    launcher: LauncherSettings = Field(default_factory=LauncherSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    artifacts: ArtifactSettings = Field(default_factory=ArtifactSettings)

    @property
    def log_dir(self) -> Path:
        return (self.agent.log_dir or self.common.paths.home / "logs").resolve()

    @property
    def sandbox_scope(self) -> str:
        """The node's name for its cgroups and uid claims: its id and its home's, since
        test stacks (and simulated nodes of several homes) may share one node id."""
        return self.agent.node_id + sandbox_scope_suffix(self.common.paths.home)

    @property
    def work_dir(self) -> Path:
        """Each job's working directory lives under here (shared by its tasks on a node)."""
        return (self.agent.work_dir or self.common.paths.home / "work").resolve()

    @property
    def state_dir(self) -> Path:
        """Where the agent keeps its tasks' pid and exit files (``processes.TaskFiles``):
        ``CORRAL_AGENT_STATE_DIR``, else a directory of this home's own in shared memory
        (tmpfs), made (mode 0700) when read, else ``$CORRAL_HOME/agent/<node>``.

        Shared memory because the files describe processes, which do not outlive the
        machine either (after a reboot, a task without them is settled as lost, as it
        is), and because each task's wrapper creates two of them: a file made on tmpfs
        costs a small fraction of the CPU it costs on a disk's filesystem such as ext4
        (docs/performance.md has the figures)."""
        if self.agent.state_dir is not None:
            return self.agent.state_dir.resolve()
        home = self.common.paths.home.resolve()
        for _ in range(2):
            private = _private_dir(SHARED_MEMORY, shared_memory_name(home))
            if private is None:
                break
            # The node's own directory is made now, not at its first task: another agent of
            # this home that stops removes the home's directory only while no node's is in
            # it (``tidy_state_dir``). Should it go between the two mkdirs, make both again.
            with contextlib.suppress(FileNotFoundError):
                (private / self.agent.node_id).mkdir(mode=0o700, exist_ok=True)
                return private / self.agent.node_id
        return home / "agent" / self.agent.node_id


def home_digest(home: Path) -> str:
    """What tells one home's node state (cgroups, state files) from another's on a
    machine several homes share: the sha256 of its resolved path, in hex."""
    return hashlib.sha256(str(home.resolve()).encode()).hexdigest()


def sandbox_scope_suffix(home: Path) -> str:
    """What ends the sandbox scope of each node agent of ``home`` (``Settings.sandbox_scope``)."""
    return f".{home_digest(home)[:8]}"


def shared_memory_name(home: Path) -> str:
    """The name of the home's directory of task state in shared memory."""
    return f"corral-{home_digest(home)[:16]}"


def _private_dir(parent: Path, name: str) -> Path | None:
    """``parent/name``, made ours (mode 0700) if it is new; None where ``parent`` is not
    there or ``name`` is somebody else's (another user's directory, a link): a directory
    anyone may write in (/dev/shm) must not decide where our files go."""
    path = parent / name
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = path.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        return None
    return path


def tidy_state_dir(state_dir: Path) -> None:
    """On a clean stop, remove the default state directory in shared memory, and its
    home's directory there, where they are empty: each stack (each test's) made its
    own, and /dev/shm is memory. A directory with files in it stays: a task still
    running keeps its pid file there, for the next agent to re-adopt it. A directory the
    operator chose (``CORRAL_AGENT_STATE_DIR``) or the home's own is left as it is."""
    private = state_dir.parent
    if private.parent != SHARED_MEMORY or not private.name.startswith("corral-"):
        return
    for directory in (state_dir, private):  # the home's goes once no other node's is in it
        try:
            directory.rmdir()
        except OSError:  # not empty (or gone already)
            return
