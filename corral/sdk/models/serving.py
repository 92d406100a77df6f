"""Services: a service's status and each of its replicas."""

from __future__ import annotations

from datetime import datetime

from corral.sdk.models.base import Model


class ServiceReplica(Model):
    """One replica: a job kept running (its restarts, readiness and what it is doing)."""

    job_id: str
    revision: int
    state: str  # Ready, Running, Starting, Pending, CrashLoopBackOff, Draining, Ended
    ready: bool
    ready_detail: str
    restarts: int
    draining: bool
    node_id: str | None
    reason: str


class Service(Model):
    """A service's status: ready replicas of those wanted, its state and why."""

    name: str
    owner: str
    virtual_cluster: str
    revision: int
    replicas: int
    ready: int
    public: bool
    endpoint: str
    state: str  # Ready, Progressing, Degraded, Unavailable, ScaledToZero
    reason: str
    requests_per_s: float | None
    replica_list: list[ServiceReplica]
    created_at: datetime
    updated_at: datetime
