"""``/virtual-clusters``: quota, use, borrowing and waiting demand per GPU type.

Each VC the viewer may use (admins: every VC, as ``GET /api/v1/virtual-clusters``
lists them: the cluster slice's ``list_vcs``, its quota and its ``usage`` made by the
API's own ``VirtualClusterView``) gets one line per GPU type: its quota, the GPUs its
jobs hold (``used``), how many of those are ``borrowed`` beyond the quota from idle VCs
(the first the scheduler takes back), the GPUs its PENDING jobs ask for, and who holds
them. Jobs that name no GPU type wait on a line of their own ("any type").

Who holds a VC's GPUs is named for admins only: a user sees their own share and a
count of the other users, as the API shows them only their own jobs.

The page follows ``/live/cluster`` (jobs placed, finished, nodes changed) and fetches
its panel again through the same route (``HX-Request``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from services.api.cluster.dependencies import ClusterRepo
from services.api.cluster.routes_vcs import VirtualClusterView
from services.api.dependencies import Db
from services.api.portal.dependencies import SignedIn
from services.api.portal.errors import PortalRoute
from services.api.portal.rendering import render
from services.api.portal.repository_vcs import DemandRow, HolderRow, VcsPageRepository
from services.api.portal.session import PortalUser
from shared.gpu_types import gpu_type_of

router = APIRouter(route_class=PortalRoute, include_in_schema=False)
ANY_TYPE = "any type"
UNKNOWN_TYPE = "unknown type"


async def vcs_page_repository(db: Db) -> VcsPageRepository:
    return VcsPageRepository(db)


VcsPageRepo = Annotated[VcsPageRepository, Depends(vcs_page_repository)]


@dataclass
class TypeLine:
    """One GPU type of one VC, as the page's table shows it."""

    gpu_type: str
    quota: int | None = None  # None: the VC has no quota of this type
    used: int = 0
    borrowed: int = 0
    waiting_gpus: int = 0
    waiting_jobs: int = 0
    holders: dict[str, int] = field(default_factory=dict)  # username -> GPUs

    def holders_for(self, user: PortalUser) -> list[tuple[str, int]]:
        """Who holds these GPUs, as ``user`` may see it: names for an admin; otherwise
        "you" and the others counted together."""
        ranked = sorted(self.holders.items(), key=lambda held: (-held[1], held[0]))
        if user.is_admin:
            return ranked
        mine = [("you", gpus) for name, gpus in ranked if name == user.username]
        others = [gpus for name, gpus in ranked if name != user.username]
        if others:
            noun = "other user" if len(others) == 1 else "other users"
            mine.append((f"{len(others)} {noun}", sum(others)))
        return mine


@dataclass(frozen=True)
class VcPanel:
    vc: VirtualClusterView
    lines: list[TypeLine]


def vc_lines(vc: VirtualClusterView, demand: list[DemandRow], holders: list[HolderRow]) -> list[TypeLine]:
    """Every GPU type the VC has a quota of, uses, or waits for; quota'd types first."""
    lines: dict[str, TypeLine] = {}

    def line(gpu_type: str) -> TypeLine:
        # A node whose GPUs' model is not known yet: its type cannot be told.
        gpu_type = gpu_type or UNKNOWN_TYPE
        return lines.setdefault(gpu_type, TypeLine(gpu_type))

    for gpu_type, gpus in vc.quota.items():
        line(gpu_type).quota = gpus
    for gpu_type, usage in vc.usage.items():
        line(gpu_type).used = usage.guaranteed + usage.borrowed
        line(gpu_type).borrowed = usage.borrowed
    for wanted in demand:
        waiting = line(wanted.gpu_type or ANY_TYPE)
        waiting.waiting_gpus += wanted.gpus
        waiting.waiting_jobs += wanted.jobs
    for held in holders:
        holding = line(gpu_type_of(held.model or ""))
        holding.holders[held.username] = holding.holders.get(held.username, 0) + held.gpus
    return sorted(lines.values(), key=lambda t: (t.quota is None, t.gpu_type == ANY_TYPE, t.gpu_type))


@router.get("/virtual-clusters", response_class=HTMLResponse)
async def vcs_page(
    request: Request, user: SignedIn, cluster: ClusterRepo, pages: VcsPageRepo
) -> HTMLResponse:
    vcs = [VirtualClusterView.from_row(r) for r in await cluster.list_vcs(None, user.principal.vc_user)]
    names = [vc.name for vc in vcs]
    demand: dict[str, list[DemandRow]] = {}
    for wanted in await pages.waiting_demand(names):
        demand.setdefault(wanted.vc, []).append(wanted)
    holders: dict[str, list[HolderRow]] = {}
    for held in await pages.holders(names):
        holders.setdefault(held.vc, []).append(held)
    panels = [VcPanel(vc, vc_lines(vc, demand.get(vc.name, []), holders.get(vc.name, []))) for vc in vcs]
    template = "fragments/vcs_panel.html" if request.headers.get("HX-Request") else "vcs.html"
    return render(request, template, user, section="vcs", title="Virtual clusters", panels=panels)
