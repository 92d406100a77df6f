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

import re
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Limits that keep one request from asking for something absurd. They are sanity caps,
# not capacity checks: whether a job fits the cluster is the scheduler's question.
MAX_TASK_ROLES = 32
MAX_INSTANCES_PER_ROLE = 1024
MAX_GPUS_PER_INSTANCE = 64
MAX_COMMAND_CHARS = 16_384
MAX_ENV_VARS = 256

_NAME_RE = r"^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$"
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

# Which service may move a job from one state to another. Enforced by the repositories
# (each writes only its own transitions) and documented in docs/tables.md.
TRANSITIONS: dict[tuple[JobState, JobState], str] = {
    (JobState.PENDING, JobState.SCHEDULED): "scheduler",
    (JobState.SCHEDULED, JobState.RUNNING): "launcher",
    (JobState.SCHEDULED, JobState.SUCCEEDED): "launcher",
    (JobState.SCHEDULED, JobState.FAILED): "launcher",
    (JobState.RUNNING, JobState.SUCCEEDED): "launcher",
    (JobState.RUNNING, JobState.FAILED): "launcher",
}


class Resources(BaseModel):
    """Per-instance resources."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus: int = Field(default=0, ge=0, le=MAX_GPUS_PER_INSTANCE, description="GPUs per instance")
    cpus: float = Field(default=1.0, gt=0, le=1024, description="CPU cores per instance")
    memory_mb: int = Field(default=1024, gt=0, le=16 * 1024 * 1024, description="Memory per instance")
    gpu_type: str | None = Field(
        default=None, max_length=64, description="GPU model, e.g. H100; any type when omitted"
    )


class TaskRole(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(pattern=_NAME_RE, description="lower-case role name, e.g. worker")]
    instances: int = Field(default=1, ge=1, le=MAX_INSTANCES_PER_ROLE)
    command: str = Field(min_length=1, max_length=MAX_COMMAND_CHARS)
    resources: Resources = Resources()
    env: dict[str, str] = Field(default_factory=dict)

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
            if not _ENV_NAME_RE.match(name):
                raise ValueError(f"environment variable name {name!r} is not a valid shell name")
            if "\x00" in item or len(item) > 32_768:
                raise ValueError(f"environment variable {name} is too long or contains NUL")
        return value


class JobSpec(BaseModel):
    """What a user submits: ``POST /api/v1/jobs``."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
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

    name: Annotated[str, Field(pattern=_NAME_RE, description="lower-case job name")]
    tasks: list[TaskRole] = Field(min_length=1, max_length=MAX_TASK_ROLES)
    virtual_cluster: Annotated[str, Field(pattern=_NAME_RE)] = "default"
    priority: int = Field(default=0, ge=-1000, le=1000)

    @model_validator(mode="after")
    def _unique_roles(self) -> JobSpec:
        names = [task.name for task in self.tasks]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"task role names must be unique; repeated: {', '.join(duplicates)}")
        return self

    @property
    def total_gpus(self) -> int:
        return sum(task.instances * task.resources.gpus for task in self.tasks)
