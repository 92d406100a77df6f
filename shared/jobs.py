"""The job model every service shares: the submitted spec and the lifecycle states.

The spec is validated once, at the API, with ``extra="forbid"`` so a typo in a field
name is an error rather than a silently ignored setting. The scheduler and launcher
read the stored spec back through the same model.

Job state lives in one row (``api.jobs.state``, with a ``version`` for optimistic
checks), and each transition belongs to exactly one service — see ``TRANSITIONS`` and
docs/tables.md. One row rather than a state per service keeps "what is my job doing?"
a single indexed read and lets every transition be a compare-and-set on ``version``.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.fetch_spec import Fetch
from shared.job_io import NAME_PATTERN as NAME_PATTERN
from shared.job_io import JobInput, JobOutput
from shared.job_resources import MAX_GPUS_PER_INSTANCE as MAX_GPUS_PER_INSTANCE
from shared.job_resources import Resources as Resources
from shared.job_retry import Classification as Classification
from shared.job_retry import ExitRule as ExitRule
from shared.job_retry import RetryPolicy as RetryPolicy
from shared.mpi_spec import MpiSettings, fill_mpi_defaults, mpi_shape_problem
from shared.request_types import Integer
from shared.service_spec import ServiceSpec
from shared.ssh_spec import SshSettings, fill_ssh_defaults
from shared.storage_spec import StorageUse

# Limits that keep one request from asking for something absurd. They are sanity caps,
# not capacity checks: whether a job fits the cluster is the scheduler's question.
MAX_TASK_ROLES = 32
MAX_INSTANCES_PER_ROLE = 1024
MAX_COMMAND_CHARS = 16_384
MAX_ENV_VARS = 256

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class JobState(StrEnum):
    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})

# Which service may move a job from one state to another (docs/tables.md). The launcher's
# transitions made in Python (a job's decision, a cancel, a requeue) are checked with
# ``check_transition``. Those made in one SQL
# statement are guarded by its ``WHERE state = ...`` instead: the API's PENDING ->
# CANCELLED (``cancel_pending_job``), the scheduler's PENDING -> SCHEDULED
# (``commit_placements``), and the launcher's SCHEDULED -> RUNNING with a job's first
# task to start (``job_running_with_its_first_task`` for the Kubernetes runner,
# ``launcher.node_mark_running`` for a node agent).
TRANSITIONS: dict[tuple[JobState, JobState], str] = {
    (JobState.PENDING, JobState.SCHEDULED): "scheduler",
    (JobState.PENDING, JobState.CANCELLED): "api",
    (JobState.SCHEDULED, JobState.CANCELLED): "launcher",
    (JobState.RUNNING, JobState.CANCELLED): "launcher",
    # A retry (after a failure that the exit-code table says to retry) or a requeue.
    (JobState.SCHEDULED, JobState.PENDING): "launcher",
    (JobState.RUNNING, JobState.PENDING): "launcher",
    (JobState.SCHEDULED, JobState.RUNNING): "launcher",
    (JobState.SCHEDULED, JobState.SUCCEEDED): "launcher",
    (JobState.SCHEDULED, JobState.FAILED): "launcher",
    (JobState.RUNNING, JobState.SUCCEEDED): "launcher",
    (JobState.RUNNING, JobState.FAILED): "launcher",
}


def check_transition(current: JobState, target: JobState, actor: str) -> None:
    """Raise if ``actor`` may not move a job from ``current`` to ``target`` (a bug)."""
    owner = TRANSITIONS.get((current, target))
    if owner != actor:
        raise RuntimeError(
            f"{actor} tried to move a job {current.value} -> {target.value}, "
            f"a transition that belongs to {owner or 'nobody'}"
        )


_LABEL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")


class Completion(BaseModel):
    """When a task role is done (OpenPAI's ``completion``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    min_succeeded: Integer | None = Field(
        default=None, ge=1, description="the role succeeds once this many instances did (default: all)"
    )
    min_failed: Integer = Field(default=1, ge=1, description="the job fails once this many instances failed")


class TaskRole(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: Annotated[str, Field(pattern=NAME_PATTERN, description="lower-case role name, e.g. worker")]
    instances: Integer = Field(default=1, ge=1, le=MAX_INSTANCES_PER_ROLE)
    command: str = Field(min_length=1, max_length=MAX_COMMAND_CHARS)
    image: str | None = Field(
        default=None,
        max_length=512,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$",
        description=(
            "container image the task runs in: on a node with a container runtime "
            "(CORRAL_CONTAINER_RUNTIME) or run by Kubernetes; see allow_host_execution"
        ),
    )
    resources: Resources = Resources()
    # The validators below check names and sizes with messages of their own; the schema
    # states the same rules, so that a client can tell a valid spec without sending it.
    env: dict[str, str] = Field(
        default_factory=dict,
        json_schema_extra={
            "maxProperties": MAX_ENV_VARS,
            "propertyNames": {"pattern": _ENV_NAME_RE.pattern},
            "additionalProperties": {"type": "string", "maxLength": 32_768, "pattern": "^[^\\x00]*$"},
        },
    )
    ports: dict[str, Annotated[Integer, Field(ge=1, le=16)]] = Field(
        default_factory=dict,
        description="ports to allocate per instance, by label",
        json_schema_extra={"maxProperties": 16, "propertyNames": {"pattern": _LABEL_RE.pattern}},
    )
    completion: Completion = Completion()
    proxy_prefix: Literal["strip", "keep"] = Field(
        default="strip",
        description=(
            "how /proxy/{job}/{task}/{label}/PATH reaches a labelled port's app: `strip` sends /PATH "
            "(as `kubectl proxy` does); `keep` sends the whole path, for an app given the prefix as its "
            "base URL (CORRAL_PROXY_PATH_<LABEL>: Jupyter's base_url, TensorBoard's path_prefix)"
        ),
    )
    shm_mb: Integer | None = Field(
        default=None,
        ge=1,
        le=16 * 1024 * 1024,
        description=(
            "size of the task's private /dev/shm in MiB (default: the node's, bounded by the task's "
            "memory); it is memory, so at most resources.memory_mb"
        ),
    )
    fetch: list[Fetch] = Field(
        default_factory=list,
        max_length=16,
        description="sources fetched into the working directory before the command runs",
    )
    event_files_from: str | None = Field(
        default=None,
        pattern=r"^job-[0-9a-z]{26}$",
        description=(
            "a job whose TensorBoard event files (*tfevents*) are copied into this task's events/ "
            "directory before it starts and while it runs; the submitter must be allowed to read that job"
        ),
    )

    @field_validator("ports")
    @classmethod
    def _port_labels(cls, value: dict[str, int]) -> dict[str, int]:
        if len(value) > 16:
            raise ValueError("at most 16 port labels per task role")
        for label in value:
            if not _LABEL_RE.fullmatch(label):
                raise ValueError(f"port label {label!r} must be a letter then letters, digits or _")
        return value

    @model_validator(mode="after")
    def _shm_within_memory(self) -> TaskRole:
        if self.shm_mb is not None and self.shm_mb > self.resources.memory_mb:
            raise ValueError(
                f"shm_mb ({self.shm_mb}) is more than the task's memory ({self.resources.memory_mb} MiB): "
                "its /dev/shm is memory the task uses; ask for more resources.memory_mb or a smaller shm_mb"
            )
        return self

    @model_validator(mode="after")
    def _fetch_paths_apart(self) -> TaskRole:
        paths = [item.path for item in self.fetch]
        for path in paths:
            if paths.count(path) > 1 or any(other.startswith(path + "/") for other in paths):
                raise ValueError(f"two fetches land at {path!r}; give each a path of its own")
        return self

    @model_validator(mode="after")
    def _completion_fits(self) -> TaskRole:
        if self.completion.min_succeeded is not None and self.completion.min_succeeded > self.instances:
            raise ValueError(
                f"completion.min_succeeded ({self.completion.min_succeeded}) is more than the "
                f"{self.instances} instances of role {self.name}"
            )
        return self

    @field_validator("command")
    @classmethod
    def _command_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("command is blank; give the shell command the task runs")
        if "\x00" in value:
            raise ValueError("command contains a NUL byte")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_ENV_VARS:
            raise ValueError(f"at most {MAX_ENV_VARS} environment variables per task role")
        for name, item in value.items():
            if not _ENV_NAME_RE.fullmatch(name):
                raise ValueError(f"environment variable name {name!r} is not a valid shell name")
            if "\x00" in item or len(item) > 32_768:
                raise ValueError(f"environment variable {name} is too long or contains NUL")
        return value


class JobSpec(BaseModel):
    """What a user submits: ``POST /api/v1/jobs``."""

    # Strict, as every model of the spec: a JSON body's types are the schema's (no true
    # for 1, no "4" for 4), for the spec is checked as the user sent it.
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "name": "hello",
                    "tasks": [
                        {
                            "name": "main",
                            "instances": 1,
                            "command": "echo hello",
                            "resources": {"gpus": 1},
                        }
                    ],
                }
            ]
        },
    )

    name: Annotated[str, Field(pattern=NAME_PATTERN, description="lower-case job name")]
    tasks: list[TaskRole] = Field(min_length=1, max_length=MAX_TASK_ROLES)
    virtual_cluster: Annotated[str, Field(pattern=NAME_PATTERN)] = "default"
    priority: Integer = Field(default=0, ge=-1000, le=1000)
    max_runtime_s: Integer | None = Field(
        default=None, ge=1, le=90 * 86_400, description="tasks still running after this are stopped"
    )
    retry: RetryPolicy = RetryPolicy()
    kind: Literal["batch", "service"] = Field(
        default="batch",
        description=(
            "batch: runs to completion (default); service: `service.replicas` copies kept running "
            "behind /serve/{name}/ (POST /api/v1/services)"
        ),
    )
    service: ServiceSpec | None = Field(default=None, description="required when kind is service")
    inputs: list[JobInput] = Field(default_factory=list, max_length=32)
    outputs: list[JobOutput] = Field(default_factory=list, max_length=32)
    framework: Literal["generic", "mpi", "horovod"] = Field(
        default="generic",
        description=(
            "generic: every task runs its command (default); mpi: a `launcher` role runs mpirun "
            "over `worker` tasks, each running sshd, with a per-job key, ssh config and hostfile; "
            "horovod: mpi, plus Horovod's variables for running without horovodrun"
        ),
    )
    mpi: MpiSettings | None = Field(default=None, description="for framework mpi or horovod")
    ssh: SshSettings | None = Field(
        default=None,
        description="ssh between the job's tasks and into them (`corral ssh`); not for mpi or horovod",
    )
    storage: list[StorageUse] = Field(
        default_factory=list, max_length=16, description="storage configs mounted at /mnt/NAME"
    )
    allow_host_execution: bool = Field(
        default=False,
        description=(
            "a task with an image may run on a node's host, outside the image, where no node has a "
            "container runtime; without it such a job waits for a node with one (refused at submit "
            "when none has)"
        ),
    )
    topology: Literal["pack", "single_node", "one_per_node"] = Field(
        default="pack",
        description=(
            "pack: fewest nodes, whole job on one node when it fits (default); single_node: every"
            " task instance on one node; one_per_node: every task instance on a node of its own"
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _framework_defaults(cls, data: Any) -> Any:
        return fill_ssh_defaults(fill_mpi_defaults(data))

    @model_validator(mode="after")
    def _framework_shape(self) -> JobSpec:
        if self.framework == "generic":
            if self.mpi is not None:
                raise ValueError(
                    "mpi settings are for framework: mpi or horovod; remove mpi or set framework"
                )
            return self
        if self.kind == "service":
            raise ValueError(f"a service runs no framework; remove framework: {self.framework}")
        problem = mpi_shape_problem(
            self.framework, {t.name: (t.instances, t.resources.gpu_type) for t in self.tasks}
        )
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _ssh_and_storage(self) -> JobSpec:
        if self.ssh is not None and self.framework != "generic":
            raise ValueError(f"framework {self.framework} wires ssh between its tasks itself; remove ssh")
        fetched: dict[str, object] = {}
        for task in self.tasks:
            for item in task.fetch:
                if fetched.setdefault(item.path, item) != item:
                    raise ValueError(
                        f"two task roles fetch different sources to {item.path!r}; the job's tasks on a"
                        " node share one working directory: give each source a path of its own"
                    )
        names = [use.name for use in self.storage]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"storage names must be unique; repeated: {', '.join(repeated)}")
        return self

    @model_validator(mode="after")
    def _unique_roles(self) -> JobSpec:
        names = [task.name for task in self.tasks]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"task role names must be unique; repeated: {', '.join(duplicates)}")
        return self

    @model_validator(mode="after")
    def _unique_inputs_and_outputs(self) -> JobSpec:
        outputs = [output.name for output in self.outputs]
        repeated = sorted({name for name in outputs if outputs.count(name) > 1})
        if repeated:
            raise ValueError(f"output names must be unique; repeated: {', '.join(repeated)}")
        paths = [item.default_path for item in self.inputs]
        for path in paths:
            clashes = [other for other in paths if other != path and other.startswith(path + "/")]
            if paths.count(path) > 1 or clashes:
                raise ValueError(
                    f"two inputs land at input path {path!r}; give one of them a path of its own"
                )
        return self

    @model_validator(mode="after")
    def _service_shape(self) -> JobSpec:
        if self.kind == "batch":
            if self.service is not None:
                raise ValueError("service settings are for kind: service; remove service or set kind")
            return self
        if self.service is None:
            raise ValueError("a kind: service job needs service (replicas, port, probes)")
        if len(self.tasks) != 1 or self.tasks[0].instances != 1:
            raise ValueError(
                "a service has one task role of one instance (each replica is one task); "
                "scale it with service.replicas"
            )
        if self.outputs:
            raise ValueError("a service keeps no outputs; outputs are for batch jobs")
        ports = self.tasks[0].ports
        labels = [self.service.port] + [
            probe.port for probe in (self.service.readiness, self.service.liveness) if probe and probe.port
        ]
        for label in labels:
            if label not in ports:
                raise ValueError(
                    f"service port {label!r} is not a port label of role {self.tasks[0].name}; "
                    f"add it to ports (has: {', '.join(sorted(ports)) or 'none'})"
                )
        return self

    @model_validator(mode="after")
    def _one_gpu_type(self) -> JobSpec:
        types = sorted({t.resources.gpu_type.upper() for t in self.tasks if t.resources.gpu_type})
        if len(types) > 1:
            raise ValueError(
                f"a job runs on one GPU type, but its tasks ask for {', '.join(types)}; give them all"
                " the same resources.gpu_type (or leave it out on all but one)"
            )
        return self

    @property
    def gpu_type(self) -> str | None:
        """The GPU type every GPU of the job must be (upper case), or None for any."""
        types = [t.resources.gpu_type for t in self.tasks if t.resources.gpu_type]
        return types[0].upper() if types else None

    @property
    def total_gpus(self) -> int:
        """Whole GPUs and fractions together, a started GPU counted whole (what tables and
        alerts show); the scheduler counts fractions exactly (``gpu_share_total``)."""
        return math.ceil(self.gpu_share_total - 1e-9)

    @property
    def gpu_share_total(self) -> float:
        """GPUs asked for, fractions counted as fractions."""
        return sum(task.instances * task.resources.gpus for task in self.tasks)
