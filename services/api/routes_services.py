"""``/api/v1/services``: every running instance of Corral's own services, and when each
was last heard (``shared/liveness.py``): what the alerter's ``ServiceDown`` rule watches."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from services.api.auth import AuthenticatedPrincipal
from services.api.deps import repository

router = APIRouter(prefix="/api/v1/services", tags=["operations"])


class ServiceInstanceView(BaseModel):
    instance_id: str
    service: str
    hostname: str
    pid: int
    started_at: datetime
    last_seen_at: datetime
    silent_s: float = Field(description="seconds since it last said it is alive (it beats every 10 s)")


class ServiceInstanceList(BaseModel):
    items: list[ServiceInstanceView]


@router.get("", operation_id="listServiceInstances", response_model=ServiceInstanceList)
async def list_service_instances(request: Request, _: AuthenticatedPrincipal) -> ServiceInstanceList:
    """Running (and crashed, until pruned after a day) service instances, by service."""
    rows = await repository(request).list_service_instances()
    return ServiceInstanceList(items=[ServiceInstanceView.model_validate(r) for r in rows])
