"""The dry run: "where would this job go, and when?" — asked by the API, answered by the
scheduler over core NATS request/reply (``corral.scheduler.dry_run``).

The scheduler answers with its own policy over a fresh snapshot, as if the job had been
submitted now, and changes nothing: the answer is what the next cycle would decide if
nothing else changed. Any scheduler instance answers (a queue group), standbys included:
answering only reads.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from shared.jobs import JobSpec

DRY_RUN_SUBJECT = "corral.scheduler.dry_run"
DRY_RUN_QUEUE = "scheduler-dry-run"


class DryRunRequest(BaseModel):
    spec: JobSpec
    user: str


class DryRunPlacement(BaseModel):
    task_role: str
    task_index: int
    node_id: str
    gpu_indices: list[int]


class DryRunAnswer(BaseModel):
    placeable_now: bool = Field(description="the next cycle would place it")
    borrowed: bool = Field(
        default=False, description="placed beyond its VC's quota, on idle GPUs another VC may reclaim"
    )
    placements: list[DryRunPlacement] = Field(default_factory=list)
    would_preempt: list[str] = Field(
        default_factory=list, description="jobs the scheduler would stop to make room for it"
    )
    reason: str | None = Field(
        default=None, description="why it would wait (the closed set of GET /jobs/{id})"
    )
    detail: str | None = None
    position: int | None = Field(default=None, description="its place among the jobs left waiting")
    estimated_start_s: float | None = Field(
        default=None,
        description="seconds from now until it is expected to start, when the running jobs' limits say",
    )
    pending_jobs: int = Field(default=0, description="jobs waiting when the question was answered")
    error: str | None = Field(default=None, description="set when the scheduler could not answer")
