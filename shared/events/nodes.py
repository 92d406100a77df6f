"""Node events: registration, liveness, drains, and the exporters' heartbeats."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from shared.container_runtime import RuntimeName
from shared.events.data import INT32, INT63, TEXT, EventData
from shared.events.envelope import Envelope
from shared.gpu_sharing import SharingMode

# --- nodes ------------------------------------------------------------------------


class GpuInfo(EventData):
    index: int
    uuid: str
    model: str
    memory_total_mb: int
    nvlink_domain: int = 0


# A topology label (rack, switch): what a node shares with its nearest neighbours.
RACK_PATTERN = r"^([A-Za-z0-9][A-Za-z0-9._-]{0,62})?$"


class NodeRegisteredData(EventData):
    node_id: str
    hostname: str
    simulated: bool
    gpus: list[GpuInfo]
    rack: str = ""
    cpus: float = 0.0
    memory_mb: int = 0
    gpu_sharing: SharingMode = "none"
    container_runtime: RuntimeName = ""


class NodeRegistered(Envelope):
    type: Literal["corral.node.registered.v1"] = "corral.node.registered.v1"
    data: NodeRegisteredData

    subject_prefix: ClassVar[str] = "corral.node.registered"

    @property
    def routing_key(self) -> str:
        return self.data.node_id


class NodeUnreachableData(EventData):
    node_id: str
    last_heartbeat_age_s: float


class NodeUnreachable(Envelope):
    type: Literal["corral.node.unreachable.v1"] = "corral.node.unreachable.v1"
    data: NodeUnreachableData

    subject_prefix: ClassVar[str] = "corral.node.unreachable"

    @property
    def routing_key(self) -> str:
        return self.data.node_id


class NodeDrainedData(EventData):
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


class NodeUndrainedData(EventData):
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


class NodeDrainRequestedData(EventData):
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


class GpuSample(EventData):
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
    nvlink_domain: int = Field(
        default=0,
        ge=0,
        le=1023,
        description="GPUs of a node with the same number are connected by NVLink (one domain: all)",
    )


class NodeTelemetryData(EventData):
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
    rack: str = Field(
        default="",
        pattern=RACK_PATTERN,
        description="the node's topology label (rack or switch); '' when not given",
    )
    cpus: float = Field(
        default=0.0, ge=0, le=1_000_000, description="CPU cores tasks may use; 0: not reported (no CPU limit)"
    )
    memory_mb: int = Field(
        default=0, ge=0, le=INT63, description="memory tasks may use, MiB; 0: not reported (no memory limit)"
    )
    gpu_sharing: SharingMode = Field(
        default="none", description="how the node's pool shares its GPUs (shared/gpu_sharing.py)"
    )
    container_runtime: RuntimeName = Field(
        default="",
        description="the runtime the node runs task images with (shared/container_runtime.py); '' for none",
    )
    gpus: list[GpuSample] = Field(max_length=1024)
    gpu_fault: str = Field(
        default="",
        max_length=2000,
        pattern=TEXT,
        description="why this node's GPUs cannot be read (NVML's error on a machine with NVIDIA "
        "GPUs); '' when they can. The monitor drains a node that reports one.",
    )

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
