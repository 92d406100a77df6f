"""Jobs: ``GET/POST /api/v1/jobs...``. A job's spec stays a plain ``dict``: the API
validates it (and says exactly which field is wrong), so the client need not track the
spec's every field to submit one."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, PrivateAttr

from corral.sdk.models.base import Model

TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
JOB_STATES = ("PENDING", "SCHEDULED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")


class Attempt(Model):
    id: str
    task_role: str
    task_index: int
    attempt_no: int
    state: str
    node_id: str
    gpu_indices: list[int]
    exit_code: int | None = None
    reason: str = ""
    classification: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def task(self) -> str:
        return f"{self.task_role}-{self.task_index}"


class Pending(Model):
    """Why a pending job waits, as the scheduler's last cycle saw it."""

    reason: str
    detail: str
    position: int
    since: datetime
    estimated_start: datetime | None = None


class Job(Model):
    id: str
    name: str
    user: str
    virtual_cluster: str
    priority: int = 0
    state: str
    exit_code: int | None = None
    reason: str = ""
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    cancel_requested_at: datetime | None = None
    retries: int = 0
    not_before: datetime | None = None
    spec: dict[str, Any] = Field(default_factory=dict)
    pending: Pending | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    # (from the submit's answer's headers, not its body: see ``warnings``)
    _warnings: list[str] = PrivateAttr(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """What the API said about how it read the submitted document (its ``Warning``
        headers; e.g. an OpenPAI field Corral reads differently than asked). Only on the
        job a submit returned."""
        return self._warnings

    def with_warnings(self, warnings: list[str]) -> Job:
        """This job, carrying the warnings its submit's answer had."""
        self._warnings = list(warnings)
        return self

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def gpus(self) -> float:
        """GPUs the whole job asks for (every instance of every task; a share of a GPU as the
        fraction it is)."""
        return sum(
            int(task.get("instances", 1)) * float(task.get("resources", {}).get("gpus", 0))
            for task in self.spec.get("tasks", [])
        )


class JobPage(Model):
    items: list[Job]
    next_cursor: str | None = Field(
        default=None, description="where the next page starts, when the API pages (null: last page)"
    )


class DryRunPlacement(Model):
    task_role: str
    task_index: int
    node_id: str
    gpu_indices: list[int]


class DryRun(Model):
    """Where a job would go now, or why it would wait and until when."""

    placeable_now: bool
    borrowed: bool = False
    placements: list[DryRunPlacement] = Field(default_factory=list)
    would_preempt: list[str] = Field(default_factory=list)
    reason: str | None = None
    detail: str | None = None
    position: int | None = None
    estimated_start: datetime | None = None
    pending_jobs: int = 0
