"""Job and task lifecycle events (subjects keyed by job id; task events by node id)."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal

from pydantic import Field

from shared.events.data import EventData
from shared.events.envelope import Envelope

# --- jobs -------------------------------------------------------------------------


class JobSubmittedData(EventData):
    job_id: str
    name: str
    user: str
    virtual_cluster: str
    total_gpus: int


class JobSubmitted(Envelope):
    type: Literal["corral.job.submitted.v1"] = "corral.job.submitted.v1"
    data: JobSubmittedData

    subject_prefix: ClassVar[str] = "corral.job.submitted"


class TaskPlacement(EventData):
    task_role: str
    task_index: int
    node_id: str
    gpu_indices: list[int]
    gpu_milli: int = Field(
        default=0, ge=0, lt=1000, description="the share of its one GPU in thousandths; 0: whole GPUs"
    )


class JobScheduledData(EventData):
    job_id: str
    generation: int = Field(description="how many times this job has been placed")
    placements: list[TaskPlacement]


class JobScheduled(Envelope):
    type: Literal["corral.job.scheduled.v1"] = "corral.job.scheduled.v1"
    data: JobScheduledData

    subject_prefix: ClassVar[str] = "corral.job.scheduled"


class JobRunningData(EventData):
    job_id: str
    generation: int


class JobRunning(Envelope):
    type: Literal["corral.job.running.v1"] = "corral.job.running.v1"
    data: JobRunningData

    subject_prefix: ClassVar[str] = "corral.job.running"


class JobEndedData(EventData):
    job_id: str
    generation: int
    exit_code: int | None = None
    reason: str = ""


class JobSucceeded(Envelope):
    type: Literal["corral.job.succeeded.v1"] = "corral.job.succeeded.v1"
    data: JobEndedData

    subject_prefix: ClassVar[str] = "corral.job.succeeded"


class JobFailed(Envelope):
    type: Literal["corral.job.failed.v1"] = "corral.job.failed.v1"
    data: JobEndedData

    subject_prefix: ClassVar[str] = "corral.job.failed"


class JobCancelled(Envelope):
    type: Literal["corral.job.cancelled.v1"] = "corral.job.cancelled.v1"
    data: JobEndedData

    subject_prefix: ClassVar[str] = "corral.job.cancelled"


class JobCancelRequestedData(EventData):
    job_id: str
    requested_by: str


class JobCancelRequested(Envelope):
    type: Literal["corral.job.cancel_requested.v1"] = "corral.job.cancel_requested.v1"
    data: JobCancelRequestedData
    subject_prefix: ClassVar[str] = "corral.job.cancel_requested"


class JobRetryingData(EventData):
    job_id: str
    generation: int = Field(description="the generation that failed")
    retries: int = Field(description="counted retries used so far")
    classification: str
    reason: str
    not_before: datetime


class JobRetrying(Envelope):
    """The job failed in a way the exit-code table retries; it is PENDING again."""

    type: Literal["corral.job.retrying.v1"] = "corral.job.retrying.v1"
    data: JobRetryingData
    subject_prefix: ClassVar[str] = "corral.job.retrying"


class JobPreemptionData(EventData):
    job_id: str
    generation: int
    reason: str


class JobPreemptRequested(Envelope):
    """The scheduler wants this job's GPUs back; the launcher stops its tasks."""

    type: Literal["corral.job.preempt_requested.v1"] = "corral.job.preempt_requested.v1"
    data: JobPreemptionData
    subject_prefix: ClassVar[str] = "corral.job.preempt_requested"


class JobPreempted(Envelope):
    """The job's tasks were stopped for a preemption and it is PENDING again (not a retry)."""

    type: Literal["corral.job.preempted.v1"] = "corral.job.preempted.v1"
    data: JobPreemptionData
    subject_prefix: ClassVar[str] = "corral.job.preempted"


# --- tasks ------------------------------------------------------------------------


class TaskAssignedData(EventData):
    attempt_id: str
    job_id: str
    generation: int
    task_role: str
    task_index: int
    node_id: str
    gpu_indices: list[int]


class TaskAssigned(Envelope):
    type: Literal["corral.task.assigned.v1"] = "corral.task.assigned.v1"
    data: TaskAssignedData

    subject_prefix: ClassVar[str] = "corral.task.assigned"

    @property
    def routing_key(self) -> str:
        return self.data.node_id


class TaskStopRequestedData(EventData):
    attempt_id: str
    job_id: str
    node_id: str
    reason: str
    grace_s: float
    platform: str | None = Field(default=None, description="e.g. preempted: how to classify the end")


class TaskStopRequested(Envelope):
    type: Literal["corral.task.stop_requested.v1"] = "corral.task.stop_requested.v1"
    data: TaskStopRequestedData
    subject_prefix: ClassVar[str] = "corral.task.stop_requested"

    @property
    def routing_key(self) -> str:
        return self.data.node_id


class TaskStartedData(EventData):
    attempt_id: str
    job_id: str
    node_id: str
    pid: int | None = None  # a process on the node; None for a Kubernetes pod


class TaskStarted(Envelope):
    type: Literal["corral.task.started.v1"] = "corral.task.started.v1"
    data: TaskStartedData

    subject_prefix: ClassVar[str] = "corral.task.started"

    @property
    def routing_key(self) -> str:
        return self.data.node_id


class TaskExitedData(EventData):
    attempt_id: str
    job_id: str
    node_id: str
    exit_code: int | None = Field(description="None when the process died of a signal")
    signal: int | None = None
    reason: str = ""
    classification: str | None = Field(default=None, description="transient, permanent or unknown")


class TaskExited(Envelope):
    type: Literal["corral.task.exited.v1"] = "corral.task.exited.v1"
    data: TaskExitedData

    subject_prefix: ClassVar[str] = "corral.task.exited"

    @property
    def routing_key(self) -> str:
        return self.data.node_id


class TaskOverLimitData(EventData):
    attempt_id: str
    job_id: str
    node_id: str
    gpu_index: int = Field(description="the GPU whose share it holds, as its node numbers them")
    used_mb: int = Field(description="the GPU memory its processes used, in MiB, as its node's agent read it")
    limit_mb: int = Field(description="its share of that GPU's memory, in MiB")
    action: Literal["killed", "warned"] = Field(
        description="killed: its node stops it (it fails, classified gpu_over_limit); warned: it runs on"
    )


class TaskOverLimit(Envelope):
    """A task holding a share of a GPU used more of its memory than its share (its node's
    agent checks each sharer's processes; told once per attempt)."""

    type: Literal["corral.task.over_limit.v1"] = "corral.task.over_limit.v1"
    data: TaskOverLimitData
    subject_prefix: ClassVar[str] = "corral.task.over_limit"

    @property
    def routing_key(self) -> str:
        return self.data.node_id
