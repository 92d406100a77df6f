"""Where a session goes: the task by its name, the attempt running it, the port by its label.

A task is named ``<role>-<index>`` (``worker-1``) in the API, the CLI and the proxy. A
session goes into the task's latest attempt of the job's current generation, and only
while that attempt runs: the node checks again when the stream opens (the attempt may
have ended in between), so the answers here are for a clear 404 or 409 early, not the
only guard. A port is the first of those the attempt was given for the label (a role
asks for ``ports: {http: 1}``; ``CORRAL_PORT_HTTP`` in the task is that same port).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from services.api.interactive.repository import InteractiveRepository, SessionJob, TaskAttempt
from shared.errors import Conflict, NotFound
from shared.jobs import JobSpec, JobState, TaskRole

_TASK_RE = re.compile(r"^([a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?)-(\d{1,6})$")


@dataclass(frozen=True)
class Target:
    """A running task of a job: where a session goes."""

    job: SessionJob
    role: TaskRole
    index: int
    attempt: TaskAttempt

    @property
    def task(self) -> str:
        return f"{self.role.name}-{self.index}"


def task_names(spec: JobSpec) -> str:
    """``main-0, worker-0 … worker-7``: every task of the job, for a 404 that says what exists."""
    return ", ".join(
        f"{t.name}-0" if t.instances == 1 else f"{t.name}-0 … {t.name}-{t.instances - 1}" for t in spec.tasks
    )


def role_of(job: SessionJob, task: str | None) -> tuple[TaskRole, int]:
    """The role and index ``task`` names (None: the first task of the first role); 404 for
    a task the job does not have, listing those it has."""
    spec = JobSpec.model_validate(job.spec)
    if task is None:
        return spec.tasks[0], 0
    match = _TASK_RE.match(task)
    if match is not None:
        name, index = match.group(1), int(match.group(2))
        for role in spec.tasks:
            if role.name == name and index < role.instances:
                return role, index
    raise NotFound(f"job {job.id} has no task {task!r}; its tasks are {task_names(spec)}")


async def running_task(repo: InteractiveRepository, job: SessionJob, task: str | None) -> Target:
    """The task's running attempt; 404 for no such task, 409 when it does not run now."""
    role, index = role_of(job, task)
    name = f"{role.name}-{index}"
    if job.state != JobState.RUNNING:
        raise Conflict(_not_running(job, name))
    attempt = await repo.latest_attempt(job.id, role.name, index)
    if attempt is None or attempt.generation != job.generation or attempt.state != "RUNNING":
        said = "has not started yet" if attempt is None else f"is {attempt.state.lower()}"
        raise Conflict(
            f"task {name} of job {job.id} {said}: a session needs it running; "
            f"wait for it (corral show {job.id}) and try again"
        )
    return Target(job, role, index, attempt)


def port_of(target: Target, label: str) -> int:
    """The task's port for ``label``; 404 listing the labels it has."""
    ports = target.attempt.ports.get(label)
    if not ports:
        labels = ", ".join(sorted(target.attempt.ports)) or "none (the role asks for no ports)"
        raise NotFound(
            f"task {target.task} of job {target.job.id} has no port labelled {label!r}; its labels: {labels}"
        )
    return ports[0]


def _not_running(job: SessionJob, task: str) -> str:
    state = job.state.lower()
    if job.state in (JobState.PENDING, JobState.SCHEDULED):
        return (
            f"job {job.id} is {state}, not running yet: wait until it runs, then open a session into {task}"
        )
    return f"job {job.id} has ended ({state}): a session needs a running task; read its logs instead"
