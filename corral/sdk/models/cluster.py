"""Nodes, GPUs, virtual clusters and Corral's own service instances."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from corral.sdk.models.base import Model


class Node(Model):
    id: str
    hostname: str = ""
    simulated: bool = False
    state: str
    drained: bool
    drain_reason: str | None = None
    drained_by: str | None = None
    drained_at: datetime | None = None
    drain_evicts: bool = False
    gpu_count: int
    expected_gpus: int = 0
    lost_gpus: int = 0
    gpus_in_use: int = 0
    last_heartbeat: datetime | None = None
    isolation: str = "unknown"
    isolation_detail: str = ""
    cpu_sharing: str | None = None


class Gpu(Model):
    node_id: str
    index: int
    uuid: str = ""
    model: str
    memory_total_mb: int | None = None
    memory_used_mb: int | None = None
    utilization_pct: float | None = None
    memory_utilization_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    throttle_reasons: list[str] | None = None
    ecc_uncorrected_volatile: int | None = None
    last_xid: int | None = None
    lost: bool = False
    unsupported: list[str] = Field(default_factory=list)
    job_id: str | None = None
    task: str | None = None
    updated_at: datetime | None = None


class HealthEvent(Model):
    at: datetime
    kind: str
    gpu_index: int | None = None
    condition: str
    action: str
    detail: str
    actor: str


class NodeDetail(Model):
    node: Node
    gpus: list[Gpu]
    health_events: list[HealthEvent]


class DrainAccepted(Model):
    node_id: str
    drain: bool
    detail: str


class JoinToken(Model):
    token: str
    expires_at: datetime
    command: str


class JoinedNats(Model):
    url: str
    user: str
    password: str
    ca_pem: str | None = None


class JoinedDatabase(Model):
    url: str
    password: str


class Joined(Model):
    """What a machine gets once on joining as a node (``Client.join``)."""

    node_id: str
    nats: JoinedNats
    database: JoinedDatabase
    node_secret: str


class NodeRemoved(Model):
    node_id: str
    detail: str


class BusCredentials(Model):
    user: str
    password: str
    url: str
    ca_pem: str | None = None
    streams: list[str]
    consumer: str
    detail: str


class HistoryPoint(Model):
    bucket: datetime
    node_id: str
    gpu_index: int
    job_id: str | None = None
    samples: int
    utilization_avg: float | None = None
    utilization_max: float | None = None
    memory_used_mb_max: int | None = None
    temperature_max: float | None = None
    power_avg: float | None = None


class GpuHistory(Model):
    resolution_s: int
    points: list[HistoryPoint]


class Usage(Model):
    guaranteed: int
    borrowed: int


class VirtualCluster(Model):
    name: str
    description: str = ""
    quota: dict[str, int]
    max_gpus_per_user: int | None = None
    interactive: bool = True
    usage: dict[str, Usage] = Field(default_factory=dict)
    pending_jobs: int = 0
    running_jobs: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    updated_by: str | None = None
    warnings: list[str] = Field(default_factory=list)


class SupervisedProcess(Model):
    """A process ``make up``'s supervisor keeps alive: a service, or its Postgres or NATS."""

    name: str
    kind: str
    pid: int | None = None
    state: str
    restarts: int = 0
    last_exit: str | None = None
    last_exit_at: datetime | None = None
    log: str = ""


class ServiceInstance(Model):
    instance_id: str
    service: str
    hostname: str = ""
    pid: int
    started_at: datetime
    last_seen_at: datetime | None = None
    silent_s: float


class ServicesOverview(Model):
    """Every service instance, and (under ``make up``) what its supervisor keeps alive."""

    items: list[ServiceInstance]
    supervised: list[SupervisedProcess] = Field(default_factory=list)
