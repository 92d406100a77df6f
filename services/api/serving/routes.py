"""``/api/v1/services``: create, list, read, scale, change the spec of, and delete services.

A service is a template (a ``kind: service`` job spec) and a count; its replicas are jobs
that the controller (``controller.py``) creates and stops, so every route here only
changes the service's row and wakes the controller. Access is the jobs' rule: a user sees
and changes their own services (admins: every one), and someone else's is "not found".
Creating or changing a service takes what a submit takes: the ``submit`` scope (every
non-GET route needs it), a VC the owner may use, inputs the owner may read, a job some
node could hold. The owner's rights, not the caller's: an admin who changes another
user's template lends its replicas nothing (the controller submits them as the owner).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.api.audit import set_audit_target
from services.api.dependencies import Db, SettingsDep
from services.api.jobs.admission import ShapeCache
from services.api.jobs.body import read_job
from services.api.jobs.dependencies import JobsRepo, Shapes
from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.api.models.inputs import pin_inputs
from services.api.models.repository import Reader
from services.api.serving import traffic
from services.api.serving.controller import ServiceController, as_owner, replica_spec, vc_user
from services.api.serving.repository import ServiceRepository, ServiceRow
from services.api.serving.status import TERMINAL, ServiceList, ServiceView, status_of
from services.api.tenants.auth import AuthenticatedPrincipal, Principal
from shared.clock import utcnow
from shared.errors import Conflict, InvalidInput, NotFound
from shared.jobs import JobSpec
from shared.request_types import Integer

router = APIRouter(prefix="/api/v1/services", tags=["services"])

CREATED = 201
ACCEPTED = 202


# The job spec's schema, with what makes it a service's: kind service and its settings.
_SERVICE_SCHEMA: dict[str, Any] = {
    "allOf": [
        {"$ref": "#/components/schemas/JobSpec"},
        {
            "type": "object",
            "required": ["kind", "service"],
            "properties": {
                "kind": {"const": "service"},
                "service": {"$ref": "#/components/schemas/ServiceSpec"},
            },
        },
    ]
}
SERVICE_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "a job spec of kind: service (JSON or YAML): one task role of one instance, "
        "whose port labels include the service's port; `service.replicas` copies are kept running",
        "content": {
            "application/json": {"schema": _SERVICE_SCHEMA},
            "application/yaml": {"schema": _SERVICE_SCHEMA},
        },
    }
}
# What a service's spec is refused for beyond its schema (a 422).
SPEC_REFUSED = (
    "a field is wrong (`errors` names it), the spec is not kind: service, the service's port is not "
    "a port label of its role (or it has more than one role or instance), an input may not be read, "
    "or no node could hold a replica, or the replica's environment (the role's env plus "
    "CORRAL_SERVICE_NAME and CORRAL_SERVICE_REVISION) is past the limits"
)


class ScaleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    replicas: Integer = Field(ge=0, le=64, description="replicas to keep running; 0 stops them all")


async def service_repository(db: Db) -> ServiceRepository:
    return ServiceRepository(db)


async def service_controller(request: Request) -> ServiceController | None:
    controller: ServiceController | None = getattr(request.app.state, "service_controller", None)
    return controller


ServicesRepo = Annotated[ServiceRepository, Depends(service_repository)]
MaybeController = Annotated[ServiceController | None, Depends(service_controller)]


def _wake(controller: ServiceController | None) -> None:
    if controller is not None:
        controller.wake()


def _not_found(name: str) -> NotFound:
    return NotFound(f"no service named {name!r}; list yours with GET /api/v1/services (corral service list)")


async def _visible(repo: ServiceRepository, name: str, principal: Principal) -> ServiceRow:
    service = await repo.get_service(name)
    if service is None or not (principal.is_admin or service.owner == principal.username):
        raise _not_found(name)
    return service


async def _view(repo: ServiceRepository, service: ServiceRow) -> ServiceView:
    replicas = (await repo.replicas_of([service.name]))[service.name]
    return status_of(service, replicas, utcnow(), traffic.requests_per_s(service.name))


def _service_spec(spec: JobSpec) -> JobSpec:
    if spec.kind != "service":
        raise InvalidInput(
            "kind: a service's spec has kind: service (and service: replicas, port, probes); "
            "batch jobs go to POST /api/v1/jobs (corral submit)"
        )
    return spec


async def _read_spec(request: Request, max_bytes: int) -> JobSpec:
    return _service_spec((await read_job(request, max_bytes)).spec)


async def _checked_template(
    spec: JobSpec, rights: Reader, revision: int, jobs: JobRepository, shapes: ShapeCache
) -> JobSpec:
    """The spec as a template: what a submit of its replicas with ``rights`` (the owner's)
    would accept (their VC, a node that could hold a replica, inputs they may read, the
    replica's own environment within the limits), with each model input pinned to the
    version it names now (``mnist@latest`` becomes ``mnist@4``), so that every replica of
    a revision serves the same model, whenever it starts."""
    try:
        replica_spec(spec, spec.name, revision)
    except ValidationError as exc:
        said = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InvalidInput(
            "a replica's job adds CORRAL_SERVICE_NAME and CORRAL_SERVICE_REVISION to the role's env,"
            f" and would be invalid: {said}"
        ) from None
    await Submitter(jobs, shapes).check(spec, rights.username, vc_user(rights))
    pinned = await pin_inputs(jobs.db, spec.inputs, rights)
    inputs = [
        item.model_copy(update={"model": row.ref}) if item.model is not None else item
        for item, row in zip(spec.inputs, pinned, strict=True)
    ]
    return spec.model_copy(update={"inputs": inputs})


async def _owner_rights(repo: ServiceRepository, service: ServiceRow, principal: Principal) -> Reader:
    """Whose rights a changed template is checked with: the owner's, since the owner's
    replicas run it (an admin changing another user's service lends it no rights); the
    caller's own when the caller is the owner (no more than their token grants)."""
    if principal.username == service.owner:
        return Reader(principal.username, principal.is_admin)
    return as_owner(service.owner, await repo.owner_role(service.owner))


@router.post(
    "",
    status_code=CREATED,
    operation_id="createService",
    response_model=ServiceView,
    openapi_extra=SERVICE_BODY,
    responses={
        403: {"description": "the token lacks the submit scope, or the VC is not one you may use"},
        409: {"description": "a service of that name exists"},
        422: {"description": SPEC_REFUSED},
    },
)
async def create_service(
    request: Request,
    principal: AuthenticatedPrincipal,
    repo: ServicesRepo,
    jobs: JobsRepo,
    shapes: Shapes,
    settings: SettingsDep,
    controller: MaybeController,
) -> ServiceView:
    """Create a service from a ``kind: service`` job spec (JSON or YAML): ``service.replicas``
    copies of its one task are kept running, reached at ``/serve/{name}/``. The spec's
    ``name`` is the service's."""
    spec = await _read_spec(request, settings.max_body_bytes)
    spec = await _checked_template(spec, Reader(principal.username, principal.is_admin), 1, jobs, shapes)
    async with repo.transaction() as tx:
        service = await tx.insert_service(spec, principal.username)
    if service is None:
        raise Conflict(
            f"a service named {spec.name!r} exists; change it with PUT /api/v1/services/{spec.name}/spec"
            " (corral service update), or pick another name"
        )
    traffic.METER.forget(service.name)
    set_audit_target(request, service.name)
    _wake(controller)
    return await _view(repo, service)


@router.get("", operation_id="listServices", response_model=ServiceList)
async def list_services(principal: AuthenticatedPrincipal, repo: ServicesRepo) -> ServiceList:
    """Your services (every one, for admins), by name, each with its status."""
    services = await repo.list_services(None if principal.is_admin else principal.username)
    replicas = await repo.replicas_of([s.name for s in services])
    now = utcnow()
    return ServiceList(
        items=[status_of(s, replicas[s.name], now, traffic.requests_per_s(s.name)) for s in services]
    )


@router.get("/{name}", operation_id="getService", response_model=ServiceView)
async def get_service(name: str, principal: AuthenticatedPrincipal, repo: ServicesRepo) -> ServiceView:
    """The service's status: ready replicas of those wanted, its state and why, each replica
    (its job, revision, readiness, restarts and what it is doing)."""
    return await _view(repo, await _visible(repo, name, principal))


@router.get("/{name}/spec", operation_id="getServiceSpec", response_model=JobSpec)
async def get_service_spec(name: str, principal: AuthenticatedPrincipal, repo: ServicesRepo) -> Any:
    """The service's current template: what ``PUT .../spec`` replaces."""
    return (await _visible(repo, name, principal)).spec


@router.post(
    "/{name}/scale",
    operation_id="scaleService",
    response_model=ServiceView,
    responses={409: {"description": "the service is being deleted"}},
)
async def scale_service(
    name: str,
    body: ScaleRequest,
    request: Request,
    principal: AuthenticatedPrincipal,
    repo: ServicesRepo,
    controller: MaybeController,
) -> ServiceView:
    """Keep ``replicas`` replicas running (0 stops them all, and the service stays). Extra
    replicas are drained before they are stopped; no new revision."""
    async with repo.transaction() as tx:
        service = await tx.lock_service(name)
        if service is None or not (principal.is_admin or service.owner == principal.username):
            raise _not_found(name)
        _not_deleting(service)
        template = service.template
        assert template.service is not None
        scaled = template.model_copy(
            update={"service": template.service.model_copy(update={"replicas": body.replicas})}
        )
        await tx.set_replicas(name, body.replicas, scaled)
    set_audit_target(request, name)
    _wake(controller)
    return await _view(repo, await _visible(repo, name, principal))


@router.put(
    "/{name}/spec",
    operation_id="updateServiceSpec",
    response_model=ServiceView,
    openapi_extra=SERVICE_BODY,
    responses={
        403: {"description": "the token lacks the submit scope, or the VC is not one you may use"},
        409: {"description": "the service is being deleted"},
        422: {"description": SPEC_REFUSED + "; or the spec names another service"},
    },
)
async def update_service_spec(
    name: str,
    request: Request,
    principal: AuthenticatedPrincipal,
    repo: ServicesRepo,
    jobs: JobsRepo,
    shapes: Shapes,
    settings: SettingsDep,
    controller: MaybeController,
) -> ServiceView:
    """A new template: the next revision. Replicas are rolled over one at a time: a new one
    is started, and once it is ready an old one is drained and stopped."""
    current = await _visible(repo, name, principal)
    spec = await _read_spec(request, settings.max_body_bytes)
    if spec.name != name:
        raise InvalidInput(
            f"name: the spec names {spec.name!r}, but this is service {name!r}; a service keeps its name"
        )
    rights = await _owner_rights(repo, current, principal)
    spec = await _checked_template(spec, rights, current.revision + 1, jobs, shapes)
    async with repo.transaction() as tx:
        service = await tx.lock_service(name)
        if service is None:
            raise _not_found(name)
        _not_deleting(service)
        await tx.set_template(name, spec)
    set_audit_target(request, name)
    _wake(controller)
    return await _view(repo, await _visible(repo, name, principal))


@router.delete(
    "/{name}",
    status_code=ACCEPTED,
    operation_id="deleteService",
    response_model=ServiceView,
)
async def delete_service(
    name: str,
    request: Request,
    principal: AuthenticatedPrincipal,
    repo: ServicesRepo,
    controller: MaybeController,
) -> ServiceView:
    """Delete the service: its replicas leave the gateway's rotation at once and are stopped
    after ``drain_s``; the service is gone once they have (at once, with none running).
    Repeating it is harmless."""
    async with repo.transaction() as tx:
        service = await tx.lock_service(name)
        if service is None or not (principal.is_admin or service.owner == principal.username):
            raise _not_found(name)
        replicas = await tx.replicas_of(name)
        if all(r.job_state in TERMINAL for r in replicas):
            await tx.delete_service(name)
        else:
            await tx.mark_deleting(name)
    set_audit_target(request, name)
    _wake(controller)
    # Built from the rows as they were locked: the controller may remove it any moment now.
    deleting = replace(service, deleting_at=service.deleting_at or utcnow())
    return status_of(deleting, replicas, utcnow(), traffic.requests_per_s(name))


def _not_deleting(service: ServiceRow) -> None:
    if service.deleting_at is not None:
        raise Conflict(f"service {service.name} is being deleted; create it again once it is gone")
