"""The launch drivers' one typed protocol (DESIGN.md §6).

A driver turns a ``TaskLaunch`` (one attempt of one task, fully resolved: command,
environment, GPUs, node) into something running, and reports what became of it. The
local driver is the node agent (``services/launcher/agent/``), which runs tasks as OS
processes on its own machine. The Kubernetes driver (``services/launcher/kubernetes/``)
runs one Pod per task. Both classify endings with the same exit-code table by filling
``TaskEnded.platform`` with conditions only they can see (``node_lost``, ``oom_killed``,
``evicted``, ``image_pull_failed``...).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from shared.fetch_spec import Fetch
from shared.service_spec import ServiceSpec


@dataclass(frozen=True)
class StorageMount:
    """A storage config as a task mounts it, at /mnt/NAME (``shared/storage_spec.py``);
    ``read_only`` when the config or the job's use says so."""

    name: str
    kind: str  # hostpath or nfs
    source: str  # the host's directory, or SERVER:/EXPORT
    read_only: bool


@dataclass(frozen=True)
class TaskLaunch:
    attempt_id: str
    job_id: str
    generation: int
    task_role: str
    task_index: int
    attempt_no: int
    node_id: str
    command: str
    env: dict[str, str]
    gpu_indices: tuple[int, ...]
    gpus: int  # the GPU devices it sees (one for a share of a GPU)
    cpus: float
    memory_mb: int
    image: str | None = None
    ports: dict[str, list[int]] = field(default_factory=dict)
    max_runtime_s: int | None = None
    service: ServiceSpec | None = None  # a replica of a service: its probes
    gpu_milli: int = 0  # a share of its one GPU, in thousandths (0: whole GPUs)
    gpu_memory_mb: int | None = None  # the share's GPU memory, when the spec says it
    storage: tuple[StorageMount, ...] = ()
    shm_mb: int | None = None  # the size of its /dev/shm (None: the node's default)
    fetch: tuple[Fetch, ...] = ()  # sources fetched into its working directory first


@dataclass(frozen=True)
class TaskEnded:
    """How an attempt ended, as far as the driver can tell."""

    exit_code: int | None
    signal: int | None = None
    platform: str | None = None  # a row key of the exit-code table, e.g. "node_lost"
    reason: str = ""


@dataclass(frozen=True)
class TaskObserved:
    """One status change the driver saw."""

    attempt_id: str
    running: bool
    ended: TaskEnded | None = None
    readiness: tuple[bool, str] | None = None  # a running replica's readiness changed: (ready, why)


class LaunchDriver(Protocol):
    async def start(self, launch: TaskLaunch) -> None:
        """Start the attempt; idempotent for the same attempt id."""

    async def stop(self, attempt_id: str, grace_s: float) -> None:
        """Ask the attempt to stop (SIGTERM), forcing it after ``grace_s``; idempotent."""

    def watch(self) -> AsyncIterator[TaskObserved]:
        """Status changes of the attempts this driver runs, resuming after disconnects."""
        ...

    async def logs(self, attempt_id: str, follow: bool) -> AsyncIterator[bytes]:
        """The attempt's output; with ``follow``, until it ends."""
        ...

    async def reconcile(self, expected: set[str]) -> set[str]:
        """Remove what runs but is not expected; return the expected ids that run."""
