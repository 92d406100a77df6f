"""``/services``: every service the viewer may see, with its replicas ready out of those
wanted, its state and why, its endpoint and its traffic; ``/services/{name}``: one
service's replicas, each with its readiness, restarts, node and a link to its job.

The pages show what ``GET /api/v1/services[/{name}]`` answers: the serving slice's rows
(``ServiceRepository``) turned into a status by its own ``status_of``, so the portal and
the API never disagree on whether a service is ``Ready`` or why not. Visibility is the
API's too: a service is its owner's and the admins'; anyone else's is "not found".

Live: a replica is a job, so a replica placed, restarted, stopped or replaced is a job
event that wakes ``/live/services`` at once. Readiness and request rates are not events
(a probe passing, a request forwarded), so the stream also refreshes the page every
telemetry interval, as the nodes page does for GPU readings.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import HTMLResponse

from services.api.dependencies import Db
from services.api.portal.dependencies import SignedIn
from services.api.portal.errors import PortalRoute
from services.api.portal.rendering import render
from services.api.portal.session import PortalUser
from services.api.serving.repository import ServiceRepository, ServiceRow
from services.api.serving.status import ServiceView, status_of
from services.api.serving.traffic import requests_per_s
from shared.clock import utcnow
from shared.errors import NotFound
from shared.job_io import NAME_PATTERN

router = APIRouter(route_class=PortalRoute, include_in_schema=False)

ServiceName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=64)]


async def service_repository(db: Db) -> ServiceRepository:
    return ServiceRepository(db)


ServicesRepo = Annotated[ServiceRepository, Depends(service_repository)]


def may_see(service: ServiceRow, user: PortalUser) -> bool:
    return user.is_admin or service.owner == user.username


async def statuses(services: ServiceRepository, rows: list[ServiceRow]) -> list[ServiceView]:
    """Each service's status, as the API's status route makes it."""
    replicas = await services.replicas_of([row.name for row in rows])
    now = utcnow()
    return [status_of(row, replicas[row.name], now, requests_per_s(row.name)) for row in rows]


@router.get("/services", response_class=HTMLResponse)
async def services_page(request: Request, user: SignedIn, services: ServicesRepo) -> HTMLResponse:
    rows = await services.list_services(None if user.is_admin else user.username)
    shown = await statuses(services, rows)
    template = "fragments/services_table.html" if request.headers.get("HX-Request") else "services.html"
    return render(request, template, user, section="services", title="Services", services=shown)


@router.get("/services/{name}", response_class=HTMLResponse)
async def service_page(
    request: Request, name: ServiceName, user: SignedIn, services: ServicesRepo
) -> HTMLResponse:
    row = await services.get_service(name)
    if row is None or not may_see(row, user):
        raise NotFound(f"no service {name!r}; the services page lists the ones you may see")
    (service,) = await statuses(services, [row])
    template = "fragments/service_detail.html" if request.headers.get("HX-Request") else "service.html"
    return render(request, template, user, section="services", title=f"Service {name}", service=service)
