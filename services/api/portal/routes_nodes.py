"""``/nodes``: every GPU as a heat map; ``/nodes/{id}``: one node's GPUs, their last
hour of utilisation, its tasks, drain, isolation and health history.

The heat map is rendered here, not drawn in the browser: one cell per GPU in a CSS grid
(``portal.css``), coloured by what its latest reading means (``gpu_state``):

- ``unhealthy``: the GPU is lost, its row remapping failed, it counts uncorrectable ECC
  errors, or it reported an Xid since its exporter started: the signs the monitor's
  health rules act on (``services/monitor/health.py``), whatever the rules then did;
- ``nodata``: never read, a reading older than ``STALE_AFTER_S``, its node unreachable,
  or a GPU that does not report utilisation;
- ``busy``: utilisation at or above ``CORRAL_API_PORTAL_IDLE_GPU_PCT``;
- ``idle``: held by a job (a live attempt, or an allocation not yet started) below it;
- ``free``: held by nothing and below it (the plain cell).

Health comes first: a faulty GPU is worth seeing even when its readings stopped.

The page follows ``/live/cluster``; its panel fetches itself again through the same
route (``HX-Request``), so the first render and every refresh are one piece of code.
Drain and undrain are the API's own requests (``cluster/routes_nodes.py``): admin only,
recorded for the monitor, which carries them out within moments.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, NamedTuple

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.api.cluster.dependencies import ClusterRepo
from services.api.cluster.models import DrainRequest
from services.api.cluster.repository import HistoryRow, NodeRow
from services.api.cluster.routes_nodes import NodeId, drain_node, undrain_node
from services.api.dependencies import Db, SettingsDep
from services.api.portal.dependencies import SignedIn, SignedInForm
from services.api.portal.errors import PortalRoute, form_as
from services.api.portal.rendering import render
from services.api.portal.repository_nodes import HeatmapGpuRow, NodesPageRepository
from services.api.portal.session import PortalUser
from shared.errors import NotFound
from shared.gpu_types import gpu_type_of

router = APIRouter(route_class=PortalRoute, include_in_schema=False)

# The monitor writes every GPU's reading each 10 s (CORRAL_MONITOR_READINGS_INTERVAL_S):
# six writes missed means the node or its monitor has stopped telling us anything.
STALE_AFTER_S = 60.0
# The node page's chart: the monitor's fine history (10 s buckets) over the last hour.
HISTORY_RESOLUTION_S = 10
HISTORY_SPAN_S = 3600
GPU_STATES = ("busy", "idle", "free", "unhealthy", "nodata")
STATE_WORDS = {"busy": "busy", "idle": "idle", "free": "free", "unhealthy": "unhealthy", "nodata": "no data"}


async def nodes_page_repository(db: Db) -> NodesPageRepository:
    return NodesPageRepository(db)


NodesPageRepo = Annotated[NodesPageRepository, Depends(nodes_page_repository)]


def health_problems(gpu: HeatmapGpuRow) -> list[str]:
    """What is wrong with the GPU, in words; empty when nothing is."""
    problems = []
    if gpu.lost:
        problems.append("lost (fell off the bus)")
    if gpu.remap_failure:
        problems.append("row remapping failed")
    if gpu.ecc_uncorrected_volatile:
        problems.append(f"{gpu.ecc_uncorrected_volatile} uncorrectable ECC errors")
    if gpu.last_xid is not None:
        problems.append(f"Xid {gpu.last_xid}")
    return problems


def gpu_state(gpu: HeatmapGpuRow, node_state: str, busy_pct: float) -> str:
    """One of ``GPU_STATES`` (see the module's docstring)."""
    if health_problems(gpu):
        return "unhealthy"
    if gpu.read_at is None or gpu.stale or node_state == "UNREACHABLE" or gpu.utilization_pct is None:
        return "nodata"
    if gpu.utilization_pct >= busy_pct:
        return "busy"
    return "idle" if gpu.job_id is not None else "free"


class GpuCell(NamedTuple):
    """A GPU as the pages show it: its state and the sentence that describes it (a
    tuple, as its row: thousands per page)."""

    row: HeatmapGpuRow
    state: str
    health: str
    label: str
    job_visible: bool  # the viewer may open the job's page (theirs, or an admin)


# The models of a cluster are few and its GPUs many: each model is parsed once.
_type_of = cache(gpu_type_of)


def _memory(gpu: HeatmapGpuRow) -> str:
    total_gb = gpu.memory_total_mb / 1024
    if gpu.memory_used_mb is None:
        return f"{total_gb:.0f} GB"
    return f"{gpu.memory_used_mb / 1024:.1f}/{total_gb:.0f} GB"


def gpu_cell(gpu: HeatmapGpuRow, node: NodeRow, busy_pct: float, user: PortalUser) -> GpuCell:
    """The GPU's state and its label: short, as a cluster's page has thousands of them
    (the node's page has the full model and every reading)."""
    state = gpu_state(gpu, node.state, busy_pct)
    problems = health_problems(gpu)
    health = "unhealthy: " + ", ".join(problems) if problems else "healthy"
    utilisation = "no reading" if gpu.utilization_pct is None else f"{gpu.utilization_pct:.0f}%"
    if gpu.stale:
        utilisation += " (stale)"
    held = f"job {gpu.job_id} {gpu.task}" if gpu.job_id else "no job"
    simulated = " simulated" if node.simulated else ""
    label = (
        f"{node.id} GPU {gpu.gpu_index}: {STATE_WORDS[state]}; {_type_of(gpu.model)}{simulated};"
        f" {utilisation}; {_memory(gpu)}; {health}; {held}"
    )
    visible = gpu.job_id is not None and (user.is_admin or gpu.job_owner == user.username)
    return GpuCell(gpu, state, health, label, visible)


@dataclass(frozen=True)
class NodeCard:
    node: NodeRow
    gpus: list[GpuCell]


def _cards(
    nodes: list[NodeRow], gpus: list[HeatmapGpuRow], busy_pct: float, user: PortalUser
) -> list[NodeCard]:
    by_node: dict[str, list[HeatmapGpuRow]] = {}
    for gpu in gpus:
        by_node.setdefault(gpu.node_id, []).append(gpu)
    return [
        NodeCard(node, [gpu_cell(g, node, busy_pct, user) for g in by_node.get(node.id, [])])
        for node in nodes
    ]


def utilisation_chart(points: list[HistoryRow]) -> dict[str, Any] | None:
    """The node's GPUs' utilisation over time as ``portal.js`` draws it: one series per
    GPU on one shared time axis, a gap where a GPU has no bucket."""
    if not points:
        return None
    times = sorted({int(p.bucket.timestamp()) for p in points})
    column = {moment: i for i, moment in enumerate(times)}
    series: dict[int, list[float | None]] = {}
    for point in points:
        values = series.setdefault(point.gpu_index, [None] * len(times))
        if point.utilization_avg is not None:
            values[column[int(point.bucket.timestamp())]] = round(point.utilization_avg, 1)
    return {
        "unit": "%",
        "max": 100,
        "x": times,
        "series": [{"label": f"GPU {index}", "values": values} for index, values in sorted(series.items())],
    }


@router.get("/nodes", response_class=HTMLResponse)
async def nodes_page(
    request: Request, user: SignedIn, cluster: ClusterRepo, pages: NodesPageRepo, settings: SettingsDep
) -> HTMLResponse:
    nodes = await cluster.list_nodes(None)
    gpus = await pages.heatmap_gpus(None, STALE_AFTER_S)
    cards = _cards(nodes, gpus, settings.portal_idle_gpu_pct, user)
    counts = Counter(cell.state for card in cards for cell in card.gpus)
    context: dict[str, Any] = {
        "cards": cards,
        "counts": {state: counts.get(state, 0) for state in GPU_STATES},
        "busy_pct": settings.portal_idle_gpu_pct,
        "drained": sum(1 for n in nodes if n.drained_at is not None),
        "unreachable": sum(1 for n in nodes if n.state == "UNREACHABLE"),
    }
    template = "fragments/nodes_heatmap.html" if request.headers.get("HX-Request") else "nodes.html"
    return render(request, template, user, section="nodes", title="Nodes", **context)


@router.get("/nodes/{node_id}", response_class=HTMLResponse)
async def node_page(
    request: Request,
    node_id: NodeId,
    user: SignedIn,
    cluster: ClusterRepo,
    pages: NodesPageRepo,
    settings: SettingsDep,
) -> HTMLResponse:
    found = await cluster.list_nodes(node_id)
    if not found:
        raise NotFound(f"no node {node_id!r}; the nodes page lists every node")
    node = found[0]
    gpus = await pages.heatmap_gpus(node_id, STALE_AFTER_S)
    context: dict[str, Any] = {
        "node": node,
        "gpus": [gpu_cell(g, node, settings.portal_idle_gpu_pct, user) for g in gpus],
        "tasks": await pages.live_tasks(node_id),
        "health_events": await cluster.health_events(node_id, 20),
        "chart": utilisation_chart(
            await cluster.gpu_history(HISTORY_RESOLUTION_S, HISTORY_SPAN_S, node_id, None, None)
        ),
        # After a drain form: which request was recorded (never the query's own text).
        "requested": {"drain": "drain", "undrain": "undrain"}.get(request.query_params.get("requested", "")),
    }
    template = "fragments/nodes_detail.html" if request.headers.get("HX-Request") else "node.html"
    return render(request, template, user, section="nodes", title=f"Node {node_id}", **context)


@router.post("/nodes/{node_id}/drain")
async def drain(
    node_id: NodeId, user: SignedInForm, cluster: ClusterRepo, reason: Annotated[str, Form()] = ""
) -> Response:
    """Admin: the API's drain request, from a form."""
    await drain_node(node_id, user.principal, cluster, form_as(DrainRequest, {"reason": reason}))
    return RedirectResponse(f"/nodes/{node_id}?requested=drain", status_code=303)


@router.post("/nodes/{node_id}/undrain")
async def undrain(
    node_id: NodeId, user: SignedInForm, cluster: ClusterRepo, reason: Annotated[str, Form()] = ""
) -> Response:
    """Admin: the API's undrain request, from a form."""
    await undrain_node(node_id, user.principal, cluster, form_as(DrainRequest, {"reason": reason}))
    return RedirectResponse(f"/nodes/{node_id}?requested=undrain", status_code=303)
