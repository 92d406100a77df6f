"""MPI and Horovod jobs: the shape of the spec (``framework: mpi`` or ``horovod``) and its
defaults. Part of the job spec (``shared/jobs.py``).

An MPI job has two task roles, as the MPI Operator's MPIJob has:

- ``launcher``: one instance, which runs ``mpirun`` (or ``horovodrun``); it needs no GPU
  unless it asks for one;
- ``worker``: ``instances`` of them, each running an unprivileged ``sshd`` on a port of
  its own, into which the launcher's ``mpirun`` starts the ranks. Each worker has
  ``slots`` (ranks) = its GPUs, or 1 without GPUs, unless ``mpi.slots_per_worker`` says.

What the platform fills in when the spec leaves it out (``fill_mpi_defaults``, run on
the submitted document before it is validated, so the stored spec shows it):

- the worker's ``command``: ``WORKER_COMMAND``, the platform's sshd in the foreground.
  A command of one's own must end by running it (``exec $CORRAL_SSHD_COMMAND``);
- the worker's ``ssh`` port label (one port per worker: workers of a job share a host on
  the local driver);
- for ``horovod``, the launcher's ``rendezvous`` port label (Horovod's gloo rendezvous,
  which the launcher serves when the job runs without ``horovodrun``).

The job's outcome is the launcher's: it succeeds when the launcher exits 0, and the
workers are then stopped; a worker that ends while the launcher runs fails the attempt.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared.request_types import Integer

LAUNCHER_ROLE = "launcher"
WORKER_ROLE = "worker"
SSH_PORT_LABEL = "ssh"
RENDEZVOUS_PORT_LABEL = "rendezvous"
MPI_FRAMEWORKS = frozenset({"mpi", "horovod"})
# The platform's sshd as the worker's foreground process: the agent sets the variable to
# the full command line (its config, host key and port are the task's own).
WORKER_COMMAND = "exec $CORRAL_SSHD_COMMAND"


class MpiSettings(BaseModel):
    """How the platform wires an MPI job's launcher to its workers."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    slots_per_worker: Integer | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="ranks per worker in the hostfile (default: the worker's GPUs, or 1 without GPUs)",
    )
    barrier_timeout_s: float = Field(
        default=120.0,
        ge=1,
        le=3600,
        description="how long the launcher's start waits for every worker's sshd to answer",
    )


def fill_mpi_defaults(data: Any) -> Any:
    """The submitted document with the MPI defaults filled in (module docstring); any
    other document, or one that is not a mapping, as it is (validation then says what is
    wrong with it)."""
    if not isinstance(data, dict):
        return data
    framework = data.get("framework")
    if not isinstance(framework, str) or framework not in MPI_FRAMEWORKS:
        return data
    tasks = data.get("tasks")
    if not isinstance(tasks, list):
        return data
    filled = []
    for task in tasks:
        if isinstance(task, dict) and task.get("name") == WORKER_ROLE:
            task = {**task, "ports": _with_port(task.get("ports"), SSH_PORT_LABEL)}
            task.setdefault("command", WORKER_COMMAND)
        elif isinstance(task, dict) and task.get("name") == LAUNCHER_ROLE and framework == "horovod":
            task = {**task, "ports": _with_port(task.get("ports"), RENDEZVOUS_PORT_LABEL)}
        filled.append(task)
    return {**data, "tasks": filled}


def _with_port(ports: Any, label: str) -> Any:
    if ports is None:
        return {label: 1}
    if isinstance(ports, dict) and label not in ports:
        return {**ports, label: 1}
    return ports  # the user's own count for the label, or something validation refuses


def mpi_shape_problem(framework: str, roles: dict[str, tuple[int, str | None]]) -> str | None:
    """What is wrong with an MPI job's task roles (``roles``: name → instances and GPU
    type), or None. The message names the field to change."""
    if WORKER_ROLE not in roles:
        return (
            f"framework {framework} needs a task role named {WORKER_ROLE!r} (the ranks' hosts); "
            f"add tasks[].name: {WORKER_ROLE}"
        )
    if LAUNCHER_ROLE not in roles:
        return (
            f"framework {framework} needs a task role named {LAUNCHER_ROLE!r} that runs mpirun; "
            f"add tasks[].name: {LAUNCHER_ROLE}"
        )
    others = sorted(set(roles) - {LAUNCHER_ROLE, WORKER_ROLE})
    if others:
        return (
            f"framework {framework} has two task roles, {LAUNCHER_ROLE} and {WORKER_ROLE}; "
            f"remove tasks[].name: {', '.join(others)} (or use framework: generic)"
        )
    if roles[LAUNCHER_ROLE][0] != 1:
        return f"tasks[{LAUNCHER_ROLE}].instances must be 1: one task runs mpirun"
    return None


def slots_per_worker(settings: MpiSettings | None, worker_gpus: int) -> int:
    """Ranks per worker in the hostfile."""
    if settings is not None and settings.slots_per_worker is not None:
        return settings.slots_per_worker
    return max(1, worker_gpus)
