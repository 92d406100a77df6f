"""An attempt a node agent finds live in the database but is not watching (an earlier
agent started it): what the agent knows of it, rebuilt from its row, so that it can be
re-adopted or settled (``NodeAgent.reconcile``)."""

from __future__ import annotations

from pathlib import Path

import asyncpg

from services.launcher.agent.artifacts import output_dir_of
from services.launcher.agent.processes import TaskFiles
from services.launcher.agent.tasks import Task
from shared.jobs import JobSpec


def unwatched_task(row: asyncpg.Record, spec: JobSpec, state_dir: Path, job_work_dir: Path) -> Task:
    """The attempt of ``row`` (a live attempt of this node) as the agent tracks one; a stop
    already asked for comes with its reason and platform condition."""
    attempt_id, role, index = row["id"], row["task_role"], row["task_index"]
    stopping = row["stop_requested_at"] is not None
    return Task(
        attempt_id,
        job_id=row["job_id"],
        generation=row["generation"],
        role=role,
        index=index,
        ports=dict(row["ports"] or {}),
        files=TaskFiles.for_attempt(state_dir, attempt_id),
        log_path=Path(row["log_path"]) if row["log_path"] else None,
        rules=tuple(spec.retry.rules),
        stop_reason=row["stop_reason"] if stopping else None,
        platform=row["stop_platform"] if stopping else None,
        memory_mb=next(r.resources.memory_mb for r in spec.tasks if r.name == role),
        gpu_indices=tuple(row["gpu_indices"] or ()),
        output_dir=output_dir_of(spec, job_work_dir, role, index),
    )
