"""A service's status: how many replicas are ready, one word for its state and a sentence
that says why, and each replica's.

The state is decided from the replicas as Postgres has them, never from the desired count
alone, so a service whose every replica crashes reads ``Degraded`` with the crash and the
next restart, not ``Ready``:

- ``ScaledToZero``: no replica wanted, none left.
- ``Unavailable``: being deleted, or replicas are wanted and none exists yet.
- ``Degraded`` (or ``Unavailable`` with none left): a replica is wanted and its owner's
  submit refuses it (``blocked_reason``: the VC or an input is no longer theirs).
- ``Degraded``: some replica crashes (it restarts with a growing delay: its reason says
  why and when), or fewer are ready than wanted for another reason that is not a rollout
  or a start under way.
- ``Progressing``: replicas are being started, or rolled over to a new revision, or
  drained; nothing is failing.
- ``Ready``: as many ready replicas of the current revision as wanted, none of an older
  one.

Pure code: the routes read the rows and the gateway's request rate and call ``status_of``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from services.api.serving.repository import ReplicaRow, ServiceRow

ServiceState = Literal["Ready", "Progressing", "Degraded", "Unavailable", "ScaledToZero"]
ReplicaState = Literal["Ready", "Running", "Starting", "Pending", "CrashLoopBackOff", "Draining", "Ended"]

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
# The launcher's reason for a replica waiting to restart (services/launcher/service_restarts.py).
RESTARTING = "restarting: "
NEXT_START = "; next start in "


class ReplicaView(BaseModel):
    job_id: str
    revision: int
    state: ReplicaState
    ready: bool
    ready_detail: str = Field(description="the readiness probe's last word")
    restarts: int = Field(description="times the replica's job was started again")
    draining: bool = Field(description="out of rotation, to be stopped")
    node_id: str | None
    reason: str


class ServiceView(BaseModel):
    name: str
    owner: str
    virtual_cluster: str
    revision: int
    replicas: int = Field(description="desired")
    ready: int = Field(description="replicas of any revision in the gateway's rotation")
    public: bool
    endpoint: str
    state: ServiceState
    reason: str
    requests_per_s: float | None = Field(
        description="requests per second through this API process's gateway over the last minute"
    )
    replica_list: list[ReplicaView]
    created_at: datetime
    updated_at: datetime


class ServiceList(BaseModel):
    items: list[ServiceView]


def replica_is_ready(replica: ReplicaRow) -> bool:
    """In the gateway's rotation: its attempt RUNNING and passing its readiness probe
    (``launcher.attempts.ready``), not draining."""
    return replica.draining_at is None and replica.attempt_state == "RUNNING" and replica.ready


def is_crash_looping(replica: ReplicaRow) -> bool:
    """Waiting to restart after its task ended (the launcher's backoff)."""
    return replica.job_state == "PENDING" and replica.job_reason.startswith(RESTARTING)


def replica_state(replica: ReplicaRow) -> ReplicaState:
    if replica.job_state in TERMINAL:
        return "Ended"
    if replica.draining_at is not None:
        return "Draining"
    if replica_is_ready(replica):
        return "Ready"
    if is_crash_looping(replica):
        return "CrashLoopBackOff"
    if replica.job_state == "PENDING":
        return "Pending"
    if replica.attempt_state == "RUNNING":
        return "Running"
    return "Starting"


def replica_reason(replica: ReplicaRow, now: datetime) -> str:
    """What the replica is doing, in a sentence: for one waiting to restart, what ended it
    and in how many seconds it starts again (from ``not_before``, as of ``now``)."""
    state = replica_state(replica)
    if state == "CrashLoopBackOff":
        said = replica.job_reason.removeprefix(RESTARTING).split(NEXT_START)[0]
        wait_s = 0.0 if replica.not_before is None else (replica.not_before - now).total_seconds()
        when = f"next start in {wait_s:.0f} s" if wait_s >= 1 else "starting again now"
        restarts = f"{replica.restarts} restart{'' if replica.restarts == 1 else 's'}"
        return f"{said}; {restarts}, {when}"
    if state == "Pending":
        return replica.pending_detail or replica.job_reason or "waiting to be placed"
    if state == "Running":
        return f"not ready: {replica.ready_detail or 'no readiness probe has passed yet'}"
    if state == "Starting":
        return "starting" + (f" on {replica.node_id}" if replica.node_id else "")
    if state == "Draining":
        return "out of rotation; stopped once it has drained"
    if state == "Ended":
        return f"ended {replica.job_state}: {replica.job_reason}; a new replica replaces it"
    return ""


def status_of(
    service: ServiceRow, replicas: list[ReplicaRow], now: datetime, requests_per_s: float | None
) -> ServiceView:
    live = [r for r in replicas if r.job_state not in TERMINAL]
    ready = sum(1 for r in live if replica_is_ready(r))
    state, reason = _state(service, live, ready, now)
    return ServiceView(
        name=service.name,
        owner=service.owner,
        virtual_cluster=service.virtual_cluster,
        revision=service.revision,
        replicas=service.replicas,
        ready=ready,
        public=service.public,
        endpoint=f"/serve/{service.name}/",
        state=state,
        reason=reason,
        requests_per_s=requests_per_s,
        replica_list=[
            ReplicaView(
                job_id=r.job_id,
                revision=r.revision,
                state=replica_state(r),
                ready=replica_is_ready(r),
                ready_detail=r.ready_detail,
                restarts=r.restarts,
                draining=r.draining_at is not None,
                node_id=r.node_id,
                reason=replica_reason(r, now),
            )
            for r in replicas
        ],
        created_at=service.created_at,
        updated_at=service.updated_at,
    )


def _state(
    service: ServiceRow, live: list[ReplicaRow], ready: int, now: datetime
) -> tuple[ServiceState, str]:
    wanted = service.replicas
    counted = f"{ready} of {wanted} replicas ready"
    if service.deleting_at is not None:
        if not live:
            return "Unavailable", "deleted: no replica was left to stop"
        return "Unavailable", f"being deleted: {len(live)} replicas left to drain and stop"
    serving = [r for r in live if r.draining_at is None]
    if wanted == 0 and not serving:
        draining = f"; {len(live)} draining" if live else ""
        return "ScaledToZero", f"scaled to zero replicas{draining}; scale it up to serve"
    if service.blocked_reason and wanted > 0:
        # The controller's last try to create a replica was refused (the owner's rights).
        return ("Degraded" if serving else "Unavailable"), f"{counted}; {service.blocked_reason}"
    crashing = [r for r in serving if is_crash_looping(r)]
    if crashing:
        worst = max(crashing, key=lambda r: r.restarts)
        return "Degraded", f"{counted}; replica {worst.job_id}: {replica_reason(worst, now)}"
    if not serving:
        return "Unavailable", f"{counted}; no replica exists yet"
    old = [r for r in serving if r.revision != service.revision]
    if old:
        return "Progressing", (
            f"{counted}; rolling over to revision {service.revision}: {len(old)} replicas of an older"
            " revision left"
        )
    if ready >= wanted and len(serving) <= wanted:
        return "Ready", counted
    if ready >= wanted:
        return "Progressing", f"{counted}; draining {len(serving) - wanted} extra replicas"
    waiting = [r for r in serving if not replica_is_ready(r)]
    first = waiting[0]
    return "Progressing", f"{counted}; replica {first.job_id}: {replica_reason(first, now)}"
