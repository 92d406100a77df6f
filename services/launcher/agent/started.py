"""Recording that a task's process runs: its attempt STARTING → RUNNING with
``task.started`` and, for its job's first task to run, the job RUNNING with
``job.running``, in one call of the node's function (``repository.mark_running``)."""

from __future__ import annotations

from services.launcher.agent.repository import NodeRepository
from services.launcher.agent.tasks import Task
from services.launcher.reporting import note_job_running, started_events


async def report_started(
    records: NodeRepository, source: str, task: Task, ticks: int | None, log_path: str | None
) -> bool:
    """Record the process (RUNNING) and say so; False if the attempt is no longer the node's."""
    started, job_running = started_events(
        source,
        attempt_id=task.attempt_id,
        job_id=task.job_id,
        generation=task.generation,
        node_id=records.node_id,
        pid=task.pid,
    )
    changed = await records.mark_running(task.attempt_id, task.pid, ticks, log_path, started, job_running)
    if changed is not None and changed["job_running"]:
        note_job_running(changed["in_state_s"], changed["age_s"])
    return changed is not None
