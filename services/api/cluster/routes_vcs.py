"""``/api/v1/virtual-clusters``: the queues jobs are submitted to, and their quotas.

A virtual cluster (VC) has a guaranteed number of GPUs per GPU type; its jobs within that
quota are guaranteed, beyond it they borrow idle GPUs and may be preempted when the owner
of those GPUs needs them (services/scheduler/planner.py). The API owns VC definitions:
an admin creates and resizes one with ``PUT`` (the scheduler applies it at its next cycle,
within seconds, no restart) and deletes one with no job waiting or running; users see
the quota and usage of the VCs they may use. A quota the cluster cannot hold is accepted
with a warning (``quota.py``).

Access. A VC's ``allowed_groups`` says who may use it: ``null`` (the default, and what
``default`` has) opens it to every user; a list opens it to the members of those groups;
``[]`` to admins only. A user neither sees a VC they may not use (not listed; 404 when
asked for by name) nor submits to it (403). Admins see and use every VC. A ``PUT`` that
leaves ``allowed_groups`` out keeps the list as it is, so resizing a quota can never open
a VC by accident; deleting a group takes it off every list, never opening one.

Interactive access. ``interactive`` (true by default) lets the owners of the VC's running
jobs open a shell, a port or a proxied page in their tasks (``services/api/interactive``);
false refuses every new one with 403. Left out, a ``PUT`` keeps it as it is.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from services.api.cluster.dependencies import ClusterRepo
from services.api.cluster.quota import gpus_per_type, quota_warnings
from services.api.cluster.repository import VcRow
from services.api.tenants.auth import AuthenticatedPrincipal, require_admin
from shared.errors import Conflict, InvalidInput, NotFound
from shared.gpu_types import gpu_type_of
from shared.jobs import NAME_PATTERN
from shared.request_types import Integer

router = APIRouter(prefix="/api/v1/virtual-clusters", tags=["virtual clusters"])
VcName = Annotated[str, Path(pattern=NAME_PATTERN, description="the VC's name, e.g. vision")]
_GPU_TYPE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
GpuType = Annotated[str, Field(pattern=_GPU_TYPE)]


class VirtualClusterSpec(BaseModel):
    """What an admin sets: ``PUT /api/v1/virtual-clusters/{name}``."""

    # Strict: a JSON body's types are the schema's (no false for 0, no "8" for 8).
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"quota": {"H100": 16}, "max_gpus_per_user": 8}]},
    )

    description: str = Field(default="", max_length=500)
    quota: dict[GpuType, Annotated[Integer, Field(ge=0, le=1_000_000)]] = Field(
        default_factory=dict,
        max_length=32,
        description='guaranteed GPUs per GPU type, e.g. {"H100": 16}; a type named twice (in any case) is'
        " refused",
        # Pydantic states the keys' pattern; only these keys are taken.
        json_schema_extra={"additionalProperties": False},
    )
    max_gpus_per_user: Integer | None = Field(
        default=None, ge=0, le=1_000_000, description="the most GPUs one user's jobs may hold in the VC"
    )
    allowed_groups: list[Annotated[str, Field(pattern=NAME_PATTERN)]] | None = Field(
        default=None,
        max_length=100,
        description="groups whose members may use the VC; null: every user; []: admins only."
        " Left out, a PUT keeps the VC's list as it is",
    )

    interactive: bool = Field(
        default=True,
        description="whether the owners of its running jobs may exec into them, forward their ports"
        " and reach them through the proxy. Left out, a PUT keeps it as it is (true for a new VC)",
    )

    @field_validator("allowed_groups")
    @classmethod
    def _distinct_groups(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else sorted(set(value))

    @field_validator("quota")
    @classmethod
    def _upper_case_types(cls, value: dict[str, int]) -> dict[str, int]:
        types = [t.upper() for t in value]
        if len(set(types)) != len(types):
            raise ValueError("a GPU type appears twice (types are not case-sensitive)")
        return {t.upper(): gpus for t, gpus in value.items()}


class Usage(BaseModel):
    guaranteed: int = Field(description="GPUs its jobs hold within the quota")
    borrowed: int = Field(description="GPUs its jobs hold beyond the quota (reclaimable)")


class VirtualClusterView(BaseModel):
    name: str
    description: str
    quota: dict[str, int]
    max_gpus_per_user: int | None
    allowed_groups: list[str] | None = Field(description="who may use it: null means every user")
    interactive: bool = Field(description="whether its jobs' owners may exec into their running tasks")
    usage: dict[str, Usage] = Field(description="GPUs held now, per GPU type")
    pending_jobs: int
    running_jobs: int
    created_at: datetime
    updated_at: datetime
    updated_by: str
    warnings: list[str] = Field(default_factory=list)

    @classmethod
    def from_row(cls, row: VcRow, warnings: list[str] | None = None) -> VirtualClusterView:
        usage: dict[str, Usage] = {}
        for item in row.usage:
            held = usage.setdefault(gpu_type_of(item["model"] or ""), Usage(guaranteed=0, borrowed=0))
            if item["borrowed"]:
                held.borrowed += int(item["gpus"])
            else:
                held.guaranteed += int(item["gpus"])
        return cls(
            name=row.name,
            description=row.description,
            quota=row.quota,
            max_gpus_per_user=row.max_gpus_per_user,
            allowed_groups=row.allowed_groups,
            interactive=row.interactive,
            usage=usage,
            pending_jobs=row.pending_jobs,
            running_jobs=row.running_jobs,
            created_at=row.created_at,
            updated_at=row.updated_at,
            updated_by=row.updated_by,
            warnings=warnings or [],
        )


class VirtualClusterList(BaseModel):
    items: list[VirtualClusterView]


@router.get("", operation_id="listVirtualClusters", response_model=VirtualClusterList)
async def list_vcs(principal: AuthenticatedPrincipal, repo: ClusterRepo) -> VirtualClusterList:
    """Every VC you may use (admins: every VC) with its quota and what it uses now."""
    rows = await repo.list_vcs(None, principal.vc_user)
    return VirtualClusterList(items=[VirtualClusterView.from_row(r) for r in rows])


@router.get("/{name}", operation_id="getVirtualCluster", response_model=VirtualClusterView)
async def get_vc(name: VcName, principal: AuthenticatedPrincipal, repo: ClusterRepo) -> VirtualClusterView:
    rows = await repo.list_vcs(name, principal.vc_user)
    if not rows:
        raise NotFound(f"no virtual cluster {name!r}; list them with GET /api/v1/virtual-clusters")
    return VirtualClusterView.from_row(rows[0])


@router.put(
    "/{name}",
    operation_id="putVirtualCluster",
    response_model=VirtualClusterView,
    response_description="changed",
    responses={
        201: {"model": VirtualClusterView, "description": "created"},
        422: {
            "description": "a field is wrong (`errors` names it), or `allowed_groups` names a group "
            "that does not exist"
        },
    },
)
async def put_vc(
    name: VcName,
    spec: VirtualClusterSpec,
    response: Response,
    principal: AuthenticatedPrincipal,
    repo: ClusterRepo,
) -> VirtualClusterView:
    """Create a VC or change its quota and limits (admin): 201 when created, 200 when changed."""
    require_admin(principal, "create or resize virtual clusters")
    warnings = quota_warnings(
        spec.quota, gpus_per_type(await repo.gpus_per_node()), await repo.quota_totals(excluding=name)
    )
    written = await repo.put_vc(
        name,
        spec.description,
        spec.quota,
        spec.max_gpus_per_user,
        principal.username,
        spec.allowed_groups,
        set_access="allowed_groups" in spec.model_fields_set,
        interactive=spec.interactive if "interactive" in spec.model_fields_set else None,
    )
    if written.missing_groups:
        raise InvalidInput(
            f"no group named {', '.join(written.missing_groups)}; create it first (POST /api/v1/groups)"
        )
    response.status_code = 201 if written.created else 200
    [row] = await repo.list_vcs(name, None)
    return VirtualClusterView.from_row(row, warnings)


@router.delete(
    "/{name}",
    status_code=204,
    operation_id="deleteVirtualCluster",
    responses={409: {"description": "the VC is `default`, or it has jobs waiting or running"}},
)
async def delete_vc(name: VcName, principal: AuthenticatedPrincipal, repo: ClusterRepo) -> Response:
    """Delete a VC that has no job waiting or running (admin); its finished jobs keep its name.

    ``default`` cannot be deleted (409): every job that names no VC goes there."""
    require_admin(principal, "delete virtual clusters")
    if name == "default":
        raise Conflict("the default virtual cluster takes every job that names none; it cannot be deleted")
    deletion = await repo.delete_vc(name)
    if not deletion.found:
        raise NotFound(f"no virtual cluster {name!r}; list them with GET /api/v1/virtual-clusters")
    if deletion.live_jobs:
        raise Conflict(
            f"virtual cluster {name} still has {deletion.live_jobs} job(s) waiting or running; cancel them or"
            " let them end, then delete it"
        )
    return Response(status_code=204)
