"""Ending every task that a home's node agents left running, for a stack that is not
coming back.

A node agent that stops leaves its tasks running on purpose: the agent that starts next
on the node adopts them (``adoption.py``). A stack made for one test or one benchmark is
not coming back. Its tasks would go on holding their ports, cores and memory, and a later
stack's task, given one of those ports, would fail to bind it. So whoever made such a
stack calls ``end_tasks_of_home`` once the stack and its node agents have stopped.

A home's tasks are found as its agents find their own after a restart: the sandboxed ones
by their cgroups (``corral/<node>.<home's digest>/<attempt>``), whatever their processes
did, the others by the pid files in the home's state directories. The uids their jobs
claimed are left to the other agents' sweep of unused claims.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

from services.launcher.agent.processes import kill_orphans
from services.launcher.agent.sandbox.cgroups import CgroupProblem, CgroupTree, cgroup_mounts, open_tree
from services.launcher.settings import SHARED_MEMORY, sandbox_scope_suffix, shared_memory_name

# How long a killed task's cgroup may stay busy while its processes exit.
_EXIT_WAIT_S = 5.0


def end_tasks_of_home(
    home: Path, *, state_dir: Path | None = None, cgroup_root: Path | None = None
) -> list[str]:
    """SIGKILL every task of every node agent of ``home``, remove their cgroups and the
    home's state in shared memory. ``state_dir`` and ``cgroup_root``: the agents'
    ``CORRAL_AGENT_STATE_DIR`` and ``CORRAL_AGENT_CGROUP_ROOT``, where they set them.
    Returns the attempts whose processes were killed."""
    ended = _end_sandboxed(sandbox_scope_suffix(home), cgroup_root)
    state_root = SHARED_MEMORY / shared_memory_name(home)
    state_dirs = [*_directories(state_root), *_directories(home / "agent")]
    for directory in [state_dir] if state_dir is not None else state_dirs:
        ended += kill_orphans(directory, keep=())
    shutil.rmtree(state_root, ignore_errors=True)
    return sorted(set(ended))


def _end_sandboxed(scope_suffix: str, cgroup_root: Path | None) -> list[str]:
    ended = []
    for scope in _node_scopes(scope_suffix, cgroup_root):
        try:
            tree = open_tree(scope, cgroup_root)
        except (CgroupProblem, OSError):
            continue
        try:
            for attempt_id in tree.names():
                with contextlib.suppress(CgroupProblem, OSError):
                    if _end(tree, attempt_id):
                        ended.append(attempt_id)
        finally:
            tree.close()
    return ended


def _end(tree: CgroupTree, attempt_id: str) -> bool:
    """Kill the attempt's processes until its cgroup can go (a process may still be
    joining it); whether it had any."""
    cgroup = tree.existing(attempt_id)
    if cgroup is None:
        return False
    had_processes = bool(cgroup.processes())
    deadline = time.monotonic() + _EXIT_WAIT_S
    cgroup.kill()
    while not cgroup.remove() and time.monotonic() < deadline:
        time.sleep(0.02)
        cgroup.kill()
    return had_processes


def _node_scopes(scope_suffix: str, cgroup_root: Path | None) -> list[str]:
    """The scopes with that suffix that hold task cgroups on this machine (none where
    it has no cgroups)."""
    v2_root, v1 = cgroup_mounts()
    root = cgroup_root or v2_root or v1.get("freezer")
    if root is None:
        return []
    return sorted(p.name for p in _directories(root / "corral") if p.name.endswith(scope_suffix))


def _directories(parent: Path) -> list[Path]:
    try:
        return [p for p in parent.iterdir() if p.is_dir()]
    except OSError:
        return []
