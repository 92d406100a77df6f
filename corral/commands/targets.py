"""Which task of a job a command means, and its labelled ports, read from the job's spec.

A task is named ``<role>-<index>`` (``worker-1``) in the API, the CLI and the proxy; without
``--task`` a command means the first instance of the first role, as the API does. The
API checks all of this again when a session is made; reading it here first lets
``port-forward`` refuse a wrong label before it listens, rather than at the first
connection, and lets ``notebook``/``tensorboard`` print a URL that exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from corral.commands.errors import Refused
from corral.sdk.models import Job


@dataclass(frozen=True)
class Target:
    name: str  # worker-1
    labels: tuple[str, ...]  # the role's port labels, in the spec's order


def task_names(job: Job) -> list[str]:
    return [f"{role['name']}-{i}" for role in _roles(job) for i in range(int(role.get("instances", 1)))]


def target(job: Job, task: str | None) -> Target:
    """The task ``task`` names (default: the first), or ``Refused`` listing the job's tasks."""
    roles = _roles(job)
    if not roles:
        raise Refused(f"job {job.id} has no tasks in its spec")
    name = task or f"{roles[0]['name']}-0"
    for role in roles:
        if name in (f"{role['name']}-{i}" for i in range(int(role.get("instances", 1)))):
            return Target(name, tuple(role.get("ports") or {}))
    raise Refused(f"job {job.id} has no task {name!r}; its tasks: {', '.join(task_names(job))}")


def check_label(job: Job, chosen: Target, label: str) -> None:
    if label not in chosen.labels:
        have = ", ".join(chosen.labels) or "none (give the role `ports: {http: 1}` in its spec)"
        raise Refused(
            f"task {chosen.name} of job {job.id} has no port labelled {label!r}; its labels: {have}"
        )


def check_running(job: Job) -> None:
    if job.state != "RUNNING":
        said = f": {job.reason}" if job.reason else ""
        raise Refused(f"job {job.id} is {job.state}{said}; it must be RUNNING")


def proxy_path(job_id: str, task: str, label: str) -> str:
    """Where the API proxies HTTP to the task's port ``label`` (with the trailing slash)."""
    return f"/proxy/{quote(job_id, safe='')}/{quote(task, safe='')}/{quote(label, safe='')}/"


def _roles(job: Job) -> list[dict[str, Any]]:
    tasks = job.spec.get("tasks")
    return [role for role in tasks if isinstance(role, dict)] if isinstance(tasks, list) else []
