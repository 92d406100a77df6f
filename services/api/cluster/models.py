"""Response models for nodes, GPUs, their health and history."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class NodeView(BaseModel):
    id: str
    hostname: str
    simulated: bool = Field(description="true when its GPUs are Corral's simulated ones")
    state: str = Field(description="READY (heartbeats arrive) or UNREACHABLE")
    drained: bool = Field(description="true when the node takes no new work")
    drain_reason: str | None
    drained_by: str | None
    drained_at: datetime | None
    drain_evicts: bool = Field(description="true when the drain also moves running work elsewhere")
    gpu_count: int
    expected_gpus: int
    lost_gpus: int
    gpus_in_use: int
    last_heartbeat: datetime
    rack: str = Field(description="its topology label (rack or switch); '' when its exporter gives none")
    isolation: str = Field(
        description="how its agent isolates tasks: sandbox (a uid, namespaces and cgroups of their "
        "own), pod (Kubernetes), none (tasks run as the agent's own user), unknown (no agent yet)"
    )
    isolation_detail: str = Field(description="what that means on this node, or why it has no sandbox")
    cpu_sharing: str | None = Field(
        description="set when the node advertises more CPUs than its machine has (or no limit, as "
        "simulated GPUs do): its tasks share cores"
    )


class GpuView(BaseModel):
    node_id: str
    index: int
    uuid: str
    model: str
    memory_total_mb: int
    memory_used_mb: int | None
    utilization_pct: float | None
    memory_utilization_pct: float | None
    temperature_c: float | None
    power_w: float | None
    sm_clock_mhz: int | None
    throttle_reasons: list[str] | None
    ecc_corrected_volatile: int | None
    ecc_uncorrected_volatile: int | None
    remapped_rows_pending: bool | None
    remap_failure: bool | None
    last_xid: int | None
    lost: bool
    unsupported: list[str] = Field(description="readings this GPU does not support (NVML NotSupported)")
    job_id: str | None = Field(description="the job using this GPU, if any")
    task: str | None
    updated_at: datetime
    nvlink_domain: int = Field(description="GPUs of the node with the same number talk over NVLink")


class HealthEventView(BaseModel):
    at: datetime
    kind: str = Field(description="finding (a health rule), drained or undrained")
    gpu_index: int | None
    condition: str
    action: str
    detail: str
    actor: str


class NodeDetail(BaseModel):
    node: NodeView
    gpus: list[GpuView]
    health_events: list[HealthEventView]


class NodeList(BaseModel):
    items: list[NodeView]


class GpuList(BaseModel):
    items: list[GpuView]


class DrainRequest(BaseModel):
    reason: str = Field(
        default="", max_length=500, pattern=r"^[^\x00]*$", description="shown beside the node; why"
    )


class DrainAccepted(BaseModel):
    node_id: str
    drain: bool
    detail: str


class HistoryPoint(BaseModel):
    bucket: datetime
    node_id: str
    gpu_index: int
    job_id: str | None
    samples: int
    utilization_avg: float | None
    utilization_max: float | None
    memory_used_mb_max: int | None
    temperature_max: float | None
    power_avg: float | None


class GpuHistory(BaseModel):
    resolution_s: int
    points: list[HistoryPoint]
