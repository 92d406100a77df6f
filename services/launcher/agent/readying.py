"""``StartSteps.ready``: what the node agent does for a claimed task between building its
environment and spawning it, in order:

1. its inputs placed and its output directory made (``artifacts.py``);
2. an MPI job's wiring (``mpi/``), or a job's ssh between and into its tasks (``job_ssh/``);
3. its sources fetched into the working directory (``fetching.py``);
4. its storage and ``/dev/shm`` size (``storage_mounts.py``);
5. its image: the command run through the node's container runtime (``containers.py``).

Each step either adds to what the task starts with (its variables, files in its working
directory, the command to run, the mounts) or says why it cannot start, with the
platform condition set on the task; a step never half-starts it.

The steps await (the database, a fetch, an NFS mount), and some claim the job's uid on
this node (``Sandbox.identities.claim``). The agent makes the attempt known to the
sandbox before they run (``Sandbox.hold``), so the sweep, which releases the uids of
jobs with no task here, keeps this job's uid while it starts; whoever fails the start
gives it back (``sandboxed.take_down``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.launcher.agent.artifacts import ArtifactsProblem, TaskArtifacts, prepare_task
from services.launcher.agent.containers import TaskImages
from services.launcher.agent.environment import Peer
from services.launcher.agent.fetching import FetchSettings, fetch_sources
from services.launcher.agent.job_ssh import ready_job_ssh
from services.launcher.agent.mpi import ready_mpi_task
from services.launcher.agent.processes import Exit
from services.launcher.agent.repository import NodeRepository
from services.launcher.agent.sandbox.sandbox import Sandbox
from services.launcher.agent.storage_mounts import TaskMounts, task_mounts
from services.launcher.agent.tasks import Task
from shared.container_runtime import ContainerRuntimeSettings
from shared.jobs import JobSpec, TaskRole

START_FAILED = "start_failed"


@dataclass(frozen=True)
class Ready:
    """A task ready to spawn: the role to start (its command as the steps wrapped it) and
    what the sandbox mounts for it."""

    role: TaskRole
    mounts: TaskMounts


@dataclass
class StartSteps:
    """The node's means for the steps (module docstring)."""

    records: NodeRepository
    artifacts: TaskArtifacts | None
    sandbox: Sandbox | None
    state_dir: Path
    images: TaskImages = field(default_factory=lambda: TaskImages(ContainerRuntimeSettings()))
    fetching: FetchSettings = field(default_factory=FetchSettings)

    async def ready(
        self,
        task: Task,
        spec: JobSpec,
        role: TaskRole,
        row: dict[str, Any],
        peers: list[Peer],
        env: dict[str, str],
        cwd: Path,
    ) -> Ready | Exit:
        """The task ready to spawn (``env`` completed), or why it cannot start."""
        if spec.inputs or spec.outputs:
            try:
                env.update(await prepare_task(self.artifacts, task, spec, cwd))
            except ArtifactsProblem as exc:
                task.platform = exc.platform
                return Exit(None, None, f"could not place the task's inputs: {exc}")
        if (failed := await ready_mpi_task(task, spec, row, peers, env, cwd, self.sandbox)) is not None:
            return failed
        run = await ready_job_ssh(self.records, task, spec, role, row, peers, env, cwd, self.sandbox)
        if isinstance(run, Exit):
            return run
        if fetched := await fetch_sources(
            task, role.fetch, row["username"], cwd, self.sandbox, self.fetching
        ):
            return fetched
        try:
            mounts = await task_mounts(self.records, task, spec, role, self.sandbox, self.state_dir)
            run = self.images.prepare(task, spec, run, env, cwd, mounts, sandboxed=self.sandbox is not None)
        except OSError as exc:  # (MountProblem, ImageProblem: each says what is missing)
            task.platform = START_FAILED
            return Exit(None, None, f"could not start the task: {exc}")
        return Ready(run, mounts)
