"""One pydantic model per event type, parsed through one discriminated union.

Subjects follow ``corral.<entity>.<verb>.<key>``: the key is the job id for job events
(so ``corral.job.*.<job>`` follows one job, in order) and the node id for task events
(so a node agent subscribes to ``corral.task.assigned.<its node>``). The envelope's
``subject`` is always the entity the event is about: the job, attempt, node or alert.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)

from shared.events.envelope import Envelope

# Bounds the database columns can hold, and text without control characters (a NUL or a
# newline in a heartbeat must be refused at the door, not fail a batch of writes).
INT32 = 2**31 - 1
INT63 = 2**63 - 1
TEXT = r"^[^\x00-\x1f\x7f]*$"


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- jobs -------------------------------------------------------------------------


class JobSubmittedData(_Data):
    job_id: str
    name: str
    user: str
    virtual_cluster: str
    total_gpus: int


class JobSubmitted(Envelope):
    type: Literal["corral.job.submitted.v1"] = "corral.job.submitted.v1"
    data: JobSubmittedData

    subject_prefix: ClassVar[str] = "corral.job.submitted"


class TaskPlacement(_Data):
    task_role: str
    task_index: int
    node_id: str
    gpu_indices: list[int]


class JobScheduledData(_Data):
    job_id: str
    generation: int = Field(description="how many times this job has been placed")
    placements: list[TaskPlacement]


class JobScheduled(Envelope):
    type: Literal["corral.job.scheduled.v1"] = "corral.job.scheduled.v1"
    data: JobScheduledData

    subject_prefix: ClassVar[str] = "corral.job.scheduled"


class JobRunningData(_Data):
    job_id: str
    generation: int


class JobRunning(Envelope):
    type: Literal["corral.job.running.v1"] = "corral.job.running.v1"
    data: JobRunningData

    subject_prefix: ClassVar[str] = "corral.job.running"


class JobEndedData(_Data):
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


class JobCancelRequestedData(_Data):
    job_id: str
    requested_by: str


class JobCancelRequested(Envelope):
    type: Literal["corral.job.cancel_requested.v1"] = "corral.job.cancel_requested.v1"
    data: JobCancelRequestedData
    subject_prefix: ClassVar[str] = "corral.job.cancel_requested"


class JobRetryingData(_Data):
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


class JobPreemptionData(_Data):
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


class TaskAssignedData(_Data):
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


class TaskStopRequestedData(_Data):
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


class TaskStartedData(_Data):
    attempt_id: str
    job_id: str
    node_id: str
    pid: int


class TaskStarted(Envelope):
    type: Literal["corral.task.started.v1"] = "corral.task.started.v1"
    data: TaskStartedData

    subject_prefix: ClassVar[str] = "corral.task.started"

    @property
    def routing_key(self) -> str:
        return self.data.node_id


class TaskExitedData(_Data):
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


# --- nodes ------------------------------------------------------------------------


class GpuInfo(_Data):
    index: int
    uuid: str
    model: str
    memory_total_mb: int


class NodeRegisteredData(_Data):
    node_id: str
    hostname: str
    simulated: bool
    gpus: list[GpuInfo]


class NodeRegistered(Envelope):
    type: Literal["corral.node.registered.v1"] = "corral.node.registered.v1"
    data: NodeRegisteredData

    subject_prefix: ClassVar[str] = "corral.node.registered"

    @property
    def routing_key(self) -> str:
        return self.data.node_id


class NodeUnreachableData(_Data):
    node_id: str
    last_heartbeat_age_s: float


class NodeUnreachable(Envelope):
    type: Literal["corral.node.unreachable.v1"] = "corral.node.unreachable.v1"
    data: NodeUnreachableData

    subject_prefix: ClassVar[str] = "corral.node.unreachable"

    @property
    def routing_key(self) -> str:
        return self.data.node_id


class NodeDrainedData(_Data):
    node_id: str
    reason: str
    drained_by: str = Field(description="'monitor' for a health rule, else the admin's name")
    evict: bool = Field(description="true when what runs on the node is to be moved elsewhere")


class NodeDrained(Envelope):
    """The node takes no new work (and, when ``evict``, its jobs are preempted)."""

    type: Literal["corral.node.drained.v1"] = "corral.node.drained.v1"
    data: NodeDrainedData

    subject_prefix: ClassVar[str] = "corral.node.drained"

    @property
    def routing_key(self) -> str:
        return self.data.node_id


class NodeUndrainedData(_Data):
    node_id: str
    undrained_by: str
    waived: list[str] = Field(default_factory=list, description="lasting conditions accepted")


class NodeUndrained(Envelope):
    type: Literal["corral.node.undrained.v1"] = "corral.node.undrained.v1"
    data: NodeUndrainedData

    subject_prefix: ClassVar[str] = "corral.node.undrained"

    @property
    def routing_key(self) -> str:
        return self.data.node_id


class NodeDrainRequestedData(_Data):
    node_id: str
    drain: bool = Field(description="true to drain, false to undrain")
    reason: str = ""
    requested_by: str


class NodeDrainRequested(Envelope):
    """An admin's drain or undrain, recorded by the API; the monitor carries it out."""

    type: Literal["corral.node.drain_requested.v1"] = "corral.node.drain_requested.v1"
    data: NodeDrainRequestedData

    subject_prefix: ClassVar[str] = "corral.node.drain_requested"

    @property
    def routing_key(self) -> str:
        return self.data.node_id


class GpuSample(_Data):
    """One GPU's readings at one instant.

    ``None`` means "no reading": either the GPU does not support the field (then its name
    is in ``unsupported``) or the GPU is ``lost`` (fell off the bus; every reading is then
    ``None``). Counters (``xid_count``, ECC) count from the exporter's start or the
    driver's last reload, so consumers compare them with the previous sample.
    """

    index: int = Field(ge=0, le=1023)
    uuid: str = Field(max_length=128, pattern=TEXT)
    model: str = Field(max_length=128, pattern=TEXT)
    memory_total_mb: int = Field(ge=0, le=INT32)
    memory_used_mb: int | None = Field(default=None, ge=0, le=INT32)
    utilization_pct: float | None = None
    memory_utilization_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: int | None = Field(default=None, ge=0, le=INT32)
    throttle_reasons: list[str] | None = Field(
        default=None, description="active clock-throttle reasons by NVML name, e.g. HwThermalSlowdown"
    )
    ecc_corrected_volatile: int | None = Field(default=None, ge=0, le=INT63)
    ecc_uncorrected_volatile: int | None = Field(default=None, ge=0, le=INT63)
    remapped_rows_pending: bool | None = None
    remap_failure: bool | None = None
    last_xid: int | None = Field(default=None, ge=0, le=INT32)
    xid_count: int = Field(
        default=0, ge=0, le=INT32, description="Xid events seen since the exporter started"
    )
    pids: list[int] = Field(
        default_factory=list, max_length=1024, description="compute processes on this GPU"
    )
    lost: bool = False
    unsupported: list[str] = Field(default_factory=list, max_length=32)


class NodeTelemetryData(_Data):
    node_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,63}$")
    hostname: str = Field(max_length=253, pattern=TEXT)
    address: str = Field(
        default="127.0.0.1", max_length=253, pattern=TEXT, description="where tasks on this node are reached"
    )
    simulated: bool = Field(description="true when the GPUs are Corral's simulated ones")
    interval_s: float
    boot_id: str = Field(
        default="",
        max_length=64,
        pattern=TEXT,
        description="changes when the exporter restarts (counters reset)",
    )
    gpus: list[GpuSample] = Field(max_length=1024)

    @model_validator(mode="after")
    def _one_sample_per_gpu(self) -> NodeTelemetryData:
        indices = [g.index for g in self.gpus]
        if len(set(indices)) != len(indices):
            raise ValueError(f"GPU indices repeat: {sorted(indices)}")
        return self


class NodeTelemetry(Envelope):
    """A node exporter's heartbeat with its GPU inventory and readings (metrics stream)."""

    type: Literal["corral.metrics.node.v1"] = "corral.metrics.node.v1"
    data: NodeTelemetryData
    subject_prefix: ClassVar[str] = "corral.metrics.node"


# --- alerts -----------------------------------------------------------------------


class AlertFiringData(_Data):
    alert_id: str
    rule: str
    severity: Literal["info", "warning", "critical"]
    summary: str
    labels: dict[str, str]


class AlertFiring(Envelope):
    type: Literal["corral.alert.firing.v1"] = "corral.alert.firing.v1"
    data: AlertFiringData

    subject_prefix: ClassVar[str] = "corral.alert.firing"


class AlertChangedData(_Data):
    alert_id: str
    rule: str
    fingerprint: str
    state: Literal["acknowledged", "resolved"]
    by: str = Field(description="'alerter' when its cause went away, else the user")
    note: str = ""


class AlertChanged(Envelope):
    """An alert was acknowledged or resolved."""

    type: Literal["corral.alert.changed.v1"] = "corral.alert.changed.v1"
    data: AlertChangedData

    subject_prefix: ClassVar[str] = "corral.alert.changed"


class AlertActionRequestedData(_Data):
    alert_id: str
    action: Literal["acknowledge", "resolve"]
    by: str
    note: str = ""


class AlertActionRequested(Envelope):
    """An on-call engineer's acknowledge or resolve, recorded by the API."""

    type: Literal["corral.alert.action_requested.v1"] = "corral.alert.action_requested.v1"
    data: AlertActionRequestedData

    subject_prefix: ClassVar[str] = "corral.alert.action_requested"


class Matcher(_Data):
    """One condition on an alert label: ``=`` equals, ``!=`` differs, ``=~`` full regex match."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    op: Literal["=", "!=", "=~"] = "="
    value: str = Field(max_length=256)

    @field_validator("value")
    @classmethod
    def _regex_compiles(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("op") == "=~":
            try:
                re.compile(value)
            except (re.error, OverflowError, RecursionError) as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from exc
        return value

    def matches(self, labels: dict[str, str]) -> bool:
        actual = labels.get(self.name, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        return re.fullmatch(self.value, actual) is not None


class SilenceRequestedData(_Data):
    silence_id: str
    action: Literal["create", "expire"]
    by: str
    matchers: list[Matcher] = Field(default_factory=list)
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    comment: str = ""


class SilenceRequested(Envelope):
    """An admin's new silence (or its early end), recorded by the API for the alerter."""

    type: Literal["corral.alert.silence_requested.v1"] = "corral.alert.silence_requested.v1"
    data: SilenceRequestedData

    subject_prefix: ClassVar[str] = "corral.alert.silence_requested"


Event = Annotated[
    JobSubmitted
    | JobScheduled
    | JobRunning
    | JobSucceeded
    | JobFailed
    | JobCancelled
    | JobCancelRequested
    | JobRetrying
    | JobPreemptRequested
    | JobPreempted
    | TaskAssigned
    | TaskStopRequested
    | TaskStarted
    | TaskExited
    | NodeRegistered
    | NodeUnreachable
    | NodeDrained
    | NodeUndrained
    | NodeDrainRequested
    | NodeTelemetry
    | AlertFiring
    | AlertChanged
    | AlertActionRequested
    | SilenceRequested,
    Field(discriminator="type"),
]

_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(raw: bytes | str) -> Event:
    """Validate raw JSON into its typed event; raises ``pydantic.ValidationError``."""
    return _ADAPTER.validate_json(raw)


def event_json_schema() -> dict[str, Any]:
    """JSON Schema of every event type, for integrators (docs/events.md)."""
    return _ADAPTER.json_schema()
