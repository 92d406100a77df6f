"""The jobs slice's request and response models (what clients see, documented in OpenAPI)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import BaseModel, Field

from services.api.jobs.pages import MAX_TAGS, TAG_PATTERN
from services.api.jobs.repository import AttemptRow, JobRow
from shared.dry_run import DryRunAnswer
from shared.jobs import JobSpec, JobState


class AttemptView(BaseModel):
    id: str
    task_role: str
    task_index: int
    attempt_no: int
    state: str
    node_id: str
    host: str
    ports: dict[str, list[int]]
    gpu_indices: list[int]
    exit_code: int | None
    signal: int | None
    reason: str
    classification: str | None = Field(description="transient, permanent or unknown, once ended")
    stop_reason: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    gpu_memory_used_mb: int | None = Field(
        default=None,
        description="a task holding a share of a GPU: the GPU memory its processes use (MiB), as its node "
        "last read it; null otherwise",
    )


class PendingView(BaseModel):
    """Why a pending job waits, as the scheduler's last cycle saw it."""

    reason: str = Field(
        description="WaitingForQuota, WaitingForPreemption, UserLimit, InsufficientGPUs, GangDoesNotFit,"
        " Fragmented, NodesUnhealthy or Priority"
    )
    detail: str
    position: int = Field(description="1-based, among waiting jobs, in the order the scheduler takes them")
    since: datetime = Field(description="since when this reason holds")
    estimated_start: datetime | None = Field(
        default=None,
        description="when it is expected to start, from the running jobs' max_runtime_s; null when"
        " nothing says",
    )


class JobView(BaseModel):
    id: str
    name: str
    user: str
    virtual_cluster: str
    priority: int
    state: JobState
    exit_code: int | None
    reason: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    retries: int = Field(description="counted retries used (transient failures are not counted)")
    not_before: datetime | None = Field(description="a retrying job waits until then")
    spec: JobSpec
    tags: list[str] = Field(default=[], description="the owner's labels (PUT /api/v1/jobs/{id}/tags)")
    pending: PendingView | None = Field(
        default=None, description="while PENDING, once the scheduler has considered it: why it waits"
    )
    attempts: list[AttemptView] = []

    @classmethod
    def from_rows(cls, job: JobRow, attempts: list[AttemptRow]) -> JobView:
        return cls(
            id=job.id,
            name=job.name,
            user=job.username,
            virtual_cluster=job.virtual_cluster,
            priority=job.priority,
            state=JobState(job.state),
            exit_code=job.exit_code,
            reason=job.reason,
            created_at=job.created_at,
            updated_at=job.updated_at,
            finished_at=job.finished_at,
            cancel_requested_at=job.cancel_requested_at,
            retries=job.retries,
            not_before=job.not_before,
            spec=JobSpec.model_validate(job.spec),
            tags=list(job.tags or []),
            pending=PendingView(
                reason=job.pending_reason,
                detail=job.pending_detail,
                position=job.pending_position,
                since=job.pending_since,
                estimated_start=job.pending_estimated_start,
            )
            if job.pending_reason
            else None,
            attempts=[AttemptView.model_validate(a, from_attributes=True) for a in attempts],
        )


class JobList(BaseModel):
    items: list[JobView]
    next_cursor: str | None = Field(
        default=None, description="give it as cursor for the next (older) page; null on the last"
    )


class AttemptList(BaseModel):
    items: list[AttemptView]


class DryRunView(DryRunAnswer):
    """``POST /api/v1/jobs/dry-run``: the scheduler's answer, with the estimate as a time."""

    estimated_start: datetime | None = Field(
        default=None, description="when it is expected to start; null when nothing says"
    )

    @classmethod
    def from_answer(cls, answer: DryRunAnswer) -> DryRunView:
        start = answer.estimated_start_s
        when = None if start is None else datetime.now(UTC) + timedelta(seconds=start)
        return cls(**answer.model_dump(exclude={"error"}), estimated_start=when)


class Tags(BaseModel):
    tags: list[Annotated[str, Field(pattern=TAG_PATTERN)]] = Field(
        max_length=MAX_TAGS,
        description="the job's tags; a PUT replaces them all",
        examples=[["team:vision", "baseline"]],
    )


class JobEvents(BaseModel):
    items: list[dict[str, Any]] = Field(description="CloudEvents documents, oldest first")
    truncated: bool = Field(description="true when there were more than `limit` events")
