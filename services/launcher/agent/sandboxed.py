"""The sandbox's side of a task's life on a node (``sandbox/``): readying it, taking
it down, what its end means, and the cgroups no live attempt owns.

Kept beside ``agent.py`` rather than in it: the agent decides when (claim, watch,
report, reconcile); these say how, for a node whose tasks are sandboxed.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections.abc import Container
from pathlib import Path

from services.launcher.agent import input_tree
from services.launcher.agent.processes import Exit, spawn_sandboxed
from services.launcher.agent.sandbox.sandbox import Sandbox
from services.launcher.agent.storage_mounts import TaskMounts
from services.launcher.agent.tasks import Task
from shared.jobs import TaskRole

log = logging.getLogger(__name__)
# The sandbox helper's exit status when it could not start a task (the exit file says why).
SANDBOX_FAILED = 125


def start(
    sandbox: Sandbox,
    task: Task,
    username: str,
    env: dict[str, str],
    cwd: Path,
    task_role: TaskRole,
    mounts: TaskMounts,
) -> subprocess.Popen[bytes]:
    """Ready the task's uid, working directory, cores and cgroup; start its helper with
    its storage and /dev/shm size (``mounts``). Its output directory (its job declares
    outputs) becomes the task's own."""
    assert task.files is not None
    assert task.log_path is not None
    launch = sandbox.prepare(
        attempt_id=task.attempt_id,
        job_id=task.job_id,
        username=username,
        resources=task_role.resources,
        gpu_indices=list(task.gpu_indices),
        workdir=cwd,
        log_path=task.log_path,
        pid_file=task.files.pid_file,
        exit_file=task.files.exit_file,
        command=task_role.command,
        binds=mounts.binds,
        shm_mb=mounts.shm_mb,
    )
    task.cgroup = launch.cgroup
    if task.output_dir is not None:
        input_tree.hand_over(task.output_dir, launch.identity.uid, launch.identity.gid)
    if launch.cpus.note:
        log.info("attempt %s on cores %s: %s", task.attempt_id, launch.cpus.cpuset, launch.cpus.note)
    own = {k: v for k, v in launch.env.items() if not (k == "OMP_NUM_THREADS" and k in task_role.env)}
    task.log_path.parent.mkdir(parents=True, exist_ok=True)
    task.files.pid_file.parent.mkdir(parents=True, exist_ok=True)
    return spawn_sandboxed(launch.argv, {**env, **own})


async def take_down(sandbox: Sandbox, task: Task) -> None:
    """Kill what is left of a sandboxed task, remove its cgroup, release its uid. A
    cgroup the kernel will not let go of is logged and left to the sweep: the task's
    end is recorded after this, and must be, whatever its cgroup does."""
    try:
        await _take_down(sandbox, task)
    except OSError as exc:
        log.warning("could not take down attempt %s's cgroup (%s); left for the sweep", task.attempt_id, exc)


async def _take_down(sandbox: Sandbox, task: Task) -> None:
    # Usually nothing is left (the task's processes went with its pid 1): the cgroup
    # goes at once, here. Processes left take a kill and a wait: in a thread.
    if not sandbox.take_down_if_empty(task.attempt_id):
        for _ in range(200):  # its last processes take a moment to be gone after a kill
            if await asyncio.to_thread(sandbox.take_down, task.attempt_id):
                break
            await asyncio.sleep(0.05)
        else:
            # Its uid stays claimed: no other job may get it while these processes live.
            log.warning("the cgroup of attempt %s still has processes; left for the sweep", task.attempt_id)
            return
    sandbox.forget(task.job_id, task.attempt_id)


def verdict(task: Task, outcome: Exit) -> Exit:
    """Say what the sandbox saw: a task whose cgroup met the kernel's OOM killer
    failed for its memory limit; one the helper could not start says which step."""
    if task.cgroup is None or outcome.exit_code == 0:
        return outcome
    if task.cgroup.oom_kills() > 0:
        task.platform = task.platform or "oom_killed"
        return Exit(outcome.exit_code, outcome.signal, f"exceeded its {task.memory_mb} MiB memory limit")
    if outcome.exit_code == SANDBOX_FAILED and outcome.reason:
        # Said by the helper in the exit file, which only root writes (never taken
        # from the task's output: a task could print anything and exit 125).
        task.platform = task.platform or "sandbox_failed"
    return outcome


async def sweep_orphans(sandbox: Sandbox, keep: Container[str]) -> None:
    """``kill_orphans`` in a thread, then forget the attempts whose cgroups went (here, not
    in the thread: starts claim uids too) and release the uids nothing uses."""
    for attempt_id in await asyncio.to_thread(kill_orphans, sandbox, keep):
        sandbox.forget_attempt(attempt_id)
    sandbox.release_unused()


def kill_orphans(sandbox: Sandbox, keep: Container[str]) -> list[str]:
    """Kill the tasks left in cgroups of this node for attempts that are no longer
    live (an earlier agent's, or ones whose processes outlived their end): found by
    their cgroups, whatever their processes did. Returns those whose cgroups went."""
    removed = []
    for attempt_id in sandbox.orphans(keep):
        cgroup = sandbox.cgroup_of(attempt_id)
        if cgroup is None:
            continue
        if cgroup.processes():
            log.warning("killing the processes of attempt %s, which is no longer live", attempt_id)
            cgroup.kill()
        if cgroup.remove():  # (one with processes still exiting goes at the next sweep)
            removed.append(attempt_id)
    return removed
