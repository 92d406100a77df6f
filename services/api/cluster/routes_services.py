"""``/api/v1/service-instances``: every running instance of Corral's own services, and when each
was last heard (``shared/liveness.py``): what the alerter's ``ServiceDown`` rule watches.

Under ``make up`` also what its supervisor keeps alive, the stack's own Postgres and NATS
among them, with their restarts and last exits: read from the supervisor's state file
(``CORRAL_API_SUPERVISOR_STATE_FILE``). Elsewhere (Kubernetes restarts the pods) that
list is empty."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field, ValidationError

from services.api.cluster.dependencies import ClusterRepo
from services.api.dependencies import SettingsDep
from services.api.tenants.auth import AuthenticatedPrincipal

router = APIRouter(prefix="/api/v1/service-instances", tags=["operations"])
log = logging.getLogger(__name__)


class ServiceInstanceView(BaseModel):
    instance_id: str
    service: str
    hostname: str
    pid: int
    started_at: datetime
    last_seen_at: datetime
    silent_s: float = Field(description="seconds since it last said it is alive (it beats every 10 s)")


class SupervisedProcessView(BaseModel):
    name: str = Field(description="a service (api, agent-local-2 ...) or a server (postgres, nats-server)")
    kind: Literal["service", "server"]
    pid: int | None
    state: Literal["running", "restarting", "crash-loop", "stopped"]
    restarts: int = Field(description="since the supervisor started")
    last_exit: str | None = Field(description='"exit 1", "killed by signal 9", or why a start failed')
    last_exit_at: datetime | None
    log: str


class ServiceInstanceList(BaseModel):
    items: list[ServiceInstanceView]
    supervised: list[SupervisedProcessView] = Field(
        default_factory=list, description="what make up's supervisor keeps alive; empty elsewhere"
    )


def supervised_processes(state_file: Path | None) -> list[SupervisedProcessView]:
    if state_file is None:
        return []
    try:
        document = json.loads(state_file.read_text())
        return [SupervisedProcessView.model_validate(p) for p in document["processes"]]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError, ValidationError) as exc:
        log.warning("could not read the supervisor's state from %s: %s", state_file, exc)
        return []


@router.get("", operation_id="listServiceInstances", response_model=ServiceInstanceList)
async def list_service_instances(
    _: AuthenticatedPrincipal, repo: ClusterRepo, settings: SettingsDep
) -> ServiceInstanceList:
    """Running (and crashed, until pruned after a day) service instances, by service."""
    rows = await repo.list_service_instances()
    return ServiceInstanceList(
        items=[ServiceInstanceView.model_validate(r, from_attributes=True) for r in rows],
        supervised=supervised_processes(settings.supervisor_state_file),
    )
