"""``/api/v1/nodes`` and ``/api/v1/gpus``: inventory, health, history; admin drain/undrain.

Nodes belong to the monitor (DESIGN.md §1), so a drain here is a *request*: the API
records it as an event in its outbox and answers 202; the monitor carries it out within
moments and the node's ``drained`` field then says so.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BeforeValidator

from services.api import SOURCE
from services.api.cluster.dependencies import ClusterRepo
from services.api.cluster.models import (
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
from services.api.cluster.repository import ClusterRepository, NodeRow
from services.api.tenants.auth import AuthenticatedPrincipal, Principal, require_admin
from shared.errors import NotFound
from shared.events import NodeDrainRequested
from shared.events.nodes import NodeDrainRequestedData

router = APIRouter(prefix="/api/v1", tags=["nodes"])
NODE_ID = r"^[A-Za-z0-9_-]{1,63}$"
NodeId = Annotated[str, Path(pattern=NODE_ID, description="the node's id, as GET /api/v1/nodes lists it")]


def _number_of_digits(value: object) -> object:
    # A query string is text, and pydantic compares it to a Literal of ints as text: "300"
    # would never equal 300.
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else value


Resolution = Annotated[
    Literal[10, 300],
    BeforeValidator(_number_of_digits),
    Query(description="10 s (kept a day) or 300 s (a month)"),
]


def _node_view(row: NodeRow) -> NodeView:
    return NodeView.model_validate({**asdict(row), "drained": row.drained_at is not None})


@router.get("/nodes", operation_id="listNodes", response_model=NodeList)
async def list_nodes(_: AuthenticatedPrincipal, repo: ClusterRepo) -> NodeList:
    """Every node: liveness, drain, GPUs registered / expected / lost / in use."""
    return NodeList(items=[_node_view(r) for r in await repo.list_nodes(None)])


@router.get("/nodes/{node_id}", operation_id="getNode", response_model=NodeDetail)
async def get_node(node_id: NodeId, _: AuthenticatedPrincipal, repo: ClusterRepo) -> NodeDetail:
    """One node with its GPUs' latest readings and its recent health history."""
    nodes = await repo.list_nodes(node_id)
    if not nodes:
        raise NotFound(f"no node {node_id!r}; list them with GET /api/v1/nodes")
    return NodeDetail(
        node=_node_view(nodes[0]),
        gpus=[GpuView.model_validate(g, from_attributes=True) for g in await repo.list_gpus(node_id)],
        health_events=[
            HealthEventView.model_validate(e, from_attributes=True)
            for e in await repo.health_events(node_id, 50)
        ],
    )


@router.get("/gpus", operation_id="listGpus", response_model=GpuList)
async def list_gpus(
    _: AuthenticatedPrincipal, repo: ClusterRepo, node: Annotated[str | None, Query(pattern=NODE_ID)] = None
) -> GpuList:
    """Every GPU's latest readings and the job/task using it (``None`` = no reading; see
    ``unsupported`` and ``lost``)."""
    return GpuList(
        items=[GpuView.model_validate(g, from_attributes=True) for g in await repo.list_gpus(node)]
    )


@router.get(
    "/gpu-history",
    operation_id="getGpuHistory",
    response_model=GpuHistory,
    responses={404: {"description": "the job named in `job` does not exist, or is not yours"}},
)
async def gpu_history(
    principal: AuthenticatedPrincipal,
    repo: ClusterRepo,
    node: Annotated[str | None, Query(pattern=NODE_ID)] = None,
    gpu: Annotated[int | None, Query(ge=0, le=1023)] = None,
    job: Annotated[str | None, Query(pattern=r"^job-[0-9a-z]{1,40}$")] = None,
    resolution_s: Resolution = 10,
    since_s: Annotated[int, Query(ge=1, le=31 * 86_400)] = 3600,
) -> GpuHistory:
    """Downsampled GPU readings for charts: per node, per GPU, or per job."""
    if job is not None:
        owner = await repo.job_owner(job)
        if owner is None or not (principal.is_admin or owner == principal.username):
            raise NotFound(f"no job with id {job!r}; list your jobs with GET /api/v1/jobs")
    rows = await repo.gpu_history(resolution_s, since_s, node, gpu, job)
    points = [HistoryPoint.model_validate(r, from_attributes=True) for r in rows]
    return GpuHistory(resolution_s=resolution_s, points=points)


async def _request_drain(
    repo: ClusterRepository, principal: Principal, node_id: str, body: DrainRequest, drain: bool
) -> DrainAccepted:
    """Record an admin's drain or undrain as an event; the monitor carries it out."""
    require_admin(principal, "drain or undrain nodes")
    if not await repo.list_nodes(node_id):
        raise NotFound(f"no node {node_id!r}; list them with GET /api/v1/nodes")
    event = NodeDrainRequested(
        source=SOURCE,
        subject=node_id,
        data=NodeDrainRequestedData(
            node_id=node_id, drain=drain, reason=body.reason, requested_by=principal.username
        ),
    )
    await repo.append_event(event, node_id)
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
    node_id: NodeId, principal: AuthenticatedPrincipal, repo: ClusterRepo, body: DrainRequest | None = None
) -> DrainAccepted:
    """Admin: the node takes no new work; what runs there keeps running."""
    return await _request_drain(repo, principal, node_id, body or DrainRequest(), True)


@router.post(
    "/nodes/{node_id}/undrain", status_code=202, operation_id="undrainNode", response_model=DrainAccepted
)
async def undrain_node(
    node_id: NodeId, principal: AuthenticatedPrincipal, repo: ClusterRepo, body: DrainRequest | None = None
) -> DrainAccepted:
    """Admin: the node takes work again. Lasting GPU faults present now (a lost GPU, a
    failed row remap, a missing GPU) are accepted and no longer drain it."""
    return await _request_drain(repo, principal, node_id, body or DrainRequest(), False)
