"""``/api/v1/nodes`` and ``/api/v1/gpus``: inventory, health, history; admin drain/undrain.

Nodes belong to the monitor (DESIGN.md §1), so a drain here is a *request*: the API
records it as an event in its outbox and answers 202; the monitor carries it out within
moments and the node's ``drained`` field then says so.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request

from services.api.auth import AuthenticatedPrincipal, Principal
from services.api.deps import repository, require_admin
from services.api.views_nodes import (
    DrainAccepted,
    DrainRequest,
    GpuHistory,
    GpuList,
    GpuView,
    HealthEventView,
    HistoryPoint,
    NodeDetail,
    NodeList,
    NodeView,
)
from shared.errors import NotFound

router = APIRouter(prefix="/api/v1", tags=["nodes"])
NODE_ID = r"^[A-Za-z0-9_-]{1,63}$"
NodeId = Annotated[str, Path(pattern=NODE_ID, description="the node's id, as GET /api/v1/nodes lists it")]


def _node_view(row: dict[str, object]) -> NodeView:
    return NodeView.model_validate({**row, "drained": row["drained_at"] is not None})


@router.get("/nodes", operation_id="listNodes", response_model=NodeList)
async def list_nodes(request: Request, _: AuthenticatedPrincipal) -> NodeList:
    """Every node: liveness, drain, GPUs registered / expected / lost / in use."""
    return NodeList(items=[_node_view(r) for r in await repository(request).list_nodes(None)])


@router.get("/nodes/{node_id}", operation_id="getNode", response_model=NodeDetail)
async def get_node(node_id: NodeId, request: Request, _: AuthenticatedPrincipal) -> NodeDetail:
    """One node with its GPUs' latest readings and its recent health history."""
    repo = repository(request)
    nodes = await repo.list_nodes(node_id)
    if not nodes:
        raise NotFound(f"no node {node_id!r}; list them with GET /api/v1/nodes")
    return NodeDetail(
        node=_node_view(nodes[0]),
        gpus=[GpuView.model_validate(g) for g in await repo.list_gpus(node_id)],
        health_events=[HealthEventView.model_validate(e) for e in await repo.health_events(node_id, 50)],
    )


@router.get("/gpus", operation_id="listGpus", response_model=GpuList)
async def list_gpus(
    request: Request, _: AuthenticatedPrincipal, node: Annotated[str | None, Query(pattern=NODE_ID)] = None
) -> GpuList:
    """Every GPU's latest readings and the job/task using it (``None`` = no reading; see
    ``unsupported`` and ``lost``)."""
    return GpuList(items=[GpuView.model_validate(g) for g in await repository(request).list_gpus(node)])


@router.get("/gpu-history", operation_id="getGpuHistory", response_model=GpuHistory)
async def gpu_history(
    request: Request,
    principal: AuthenticatedPrincipal,
    node: Annotated[str | None, Query(pattern=NODE_ID)] = None,
    gpu: Annotated[int | None, Query(ge=0, le=1023)] = None,
    job: Annotated[str | None, Query(pattern=r"^job-[0-9a-z]{1,40}$")] = None,
    resolution_s: Annotated[Literal[10, 300], Query(description="10 s (kept a day) or 300 s (a month)")] = 10,
    since_s: Annotated[int, Query(ge=1, le=31 * 86_400)] = 3600,
) -> GpuHistory:
    """Downsampled GPU readings for charts: per node, per GPU, or per job."""
    repo = repository(request)
    if job is not None:
        owner = await repo.get_job(job)
        if owner is None or not (principal.is_admin or owner["username"] == principal.username):
            raise NotFound(f"no job with id {job!r}; list your jobs with GET /api/v1/jobs")
    rows = await repo.gpu_history(resolution_s, since_s, node, gpu, job)
    return GpuHistory(resolution_s=resolution_s, points=[HistoryPoint.model_validate(r) for r in rows])


async def _request_drain(
    request: Request, principal: Principal, node_id: str, body: DrainRequest, drain: bool
) -> DrainAccepted:
    require_admin(principal, "drain or undrain nodes")
    repo = repository(request)
    if not await repo.list_nodes(node_id):
        raise NotFound(f"no node {node_id!r}; list them with GET /api/v1/nodes")
    await repo.request_drain(node_id, drain, body.reason, principal.username)
    verb = "drain" if drain else "undrain"
    return DrainAccepted(
        node_id=node_id,
        drain=drain,
        detail=f"{verb} requested; GET /api/v1/nodes/{node_id} shows it once the monitor has acted",
    )


@router.post(
    "/nodes/{node_id}/drain", status_code=202, operation_id="drainNode", response_model=DrainAccepted
)
async def drain_node(
    node_id: NodeId, request: Request, principal: AuthenticatedPrincipal, body: DrainRequest | None = None
) -> DrainAccepted:
    """Admin: the node takes no new work; what runs there keeps running."""
    return await _request_drain(request, principal, node_id, body or DrainRequest(), True)


@router.post(
    "/nodes/{node_id}/undrain", status_code=202, operation_id="undrainNode", response_model=DrainAccepted
)
async def undrain_node(
    node_id: NodeId, request: Request, principal: AuthenticatedPrincipal, body: DrainRequest | None = None
) -> DrainAccepted:
    """Admin: the node takes work again. Lasting GPU faults present now (a lost GPU, a
    failed row remap, a missing GPU) are accepted and no longer drain it."""
    return await _request_drain(request, principal, node_id, body or DrainRequest(), False)
