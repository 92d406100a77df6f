"""Ending every task that a home's node agents left running, for a stack that is not
coming back.

A node agent that stops leaves its tasks running on purpose: the agent that starts next
on the node adopts them (``adoption.py``). A stack made for one test or one benchmark is
not coming back. Its tasks would go on holding their ports, cores and memory, and a later
stack's task, given one of those ports, would fail to bind it. So whoever made such a
stack calls ``end_tasks_of_home`` once the stack has stopped.

A home's tasks are found as its agents find their own after a restart: the sandboxed ones
by their cgroups (``corral/<node>.<home's digest>/<attempt>``), whatever their processes
did, the others by the pid files in the home's state directories.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

from services.launcher.agent.processes import kill_orphans
from services.launcher.agent.sandbox.cgroups import CgroupProblem, TaskCgroup, cgroup_mounts, open_tree
from services.launcher.settings import SHARED_MEMORY, sandbox_scope_suffix, shared_memory_name

# How long a killed task's cgroup may stay busy while its processes exit.
_EXIT_WAIT_S = 5.0


def end_tasks_of_home(home: Path) -> list[str]:
    """SIGKILL every task of every node agent of ``home``, remove their cgroups and the
    home's state in shared memory. Returns the attempts whose processes were killed."""
    ended = [*_end_sandboxed(sandbox_scope_suffix(home))]
    state_root = SHARED_MEMORY / shared_memory_name(home)
    for state_dir in [*_directories(state_root), *_directories(home / "agent")]:
        ended += kill_orphans(state_dir, keep=())
    shutil.rmtree(state_root, ignore_errors=True)
    return sorted(set(ended))


def _end_sandboxed(scope_suffix: str) -> list[str]:
    ended = []
    for scope in _node_scopes(scope_suffix):
        try:
            tree = open_tree(scope)
        except CgroupProblem:
            continue
        for attempt_id in tree.names():
            cgroup = tree.existing(attempt_id)
            if cgroup is None:
                continue
            if cgroup.processes():
                cgroup.kill()
                ended.append(attempt_id)
            _remove(cgroup)
        tree.close()
    return ended


def _node_scopes(scope_suffix: str) -> list[str]:
    """The scopes with that suffix that hold task cgroups on this machine (none where
    it has no cgroups)."""
    v2_root, v1 = cgroup_mounts()
    root = v2_root or v1.get("freezer")
    if root is None:
        return []
    return sorted(p.name for p in _directories(root / "corral") if p.name.endswith(scope_suffix))


def _remove(cgroup: TaskCgroup) -> None:
    deadline = time.monotonic() + _EXIT_WAIT_S
    with contextlib.suppress(CgroupProblem, OSError):
        while not cgroup.remove() and time.monotonic() < deadline:
            time.sleep(0.02)


def _directories(parent: Path) -> list[Path]:
    try:
        return [p for p in parent.iterdir() if p.is_dir()]
    except OSError:
        return []
