"""What the nodes pages read that the cluster slice does not: every GPU with its latest
reading, the freshness of that reading and the job holding it, in one query (the heat
map), and the tasks running on one node. SQL only; ``routes_nodes.py`` decides what a
reading means (busy, idle, unhealthy, no data).

The heat map is the portal's largest read: a cluster of 500 nodes has 4,000 GPUs, and
the page re-reads them on every refresh. So the query joins each table once by key
(``sql/nodes.sql``) instead of looking up the holder of each GPU on its own, as the
API's ``monitor.gpu_status`` view does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from services.api.portal.repository import SQL
from shared.db.pool import Database


class HeatmapGpuRow(NamedTuple):
    """One GPU's row. A named tuple, as the monitor's history rows are: a large cluster's
    page makes thousands on every refresh, and a tuple is made in a fraction of a
    dataclass's time (built by position, in the query's column order)."""

    node_id: str
    gpu_index: int
    model: str
    memory_total_mb: int
    memory_used_mb: int | None
    utilization_pct: float | None
    temperature_c: float | None
    last_xid: int | None
    lost: bool
    remap_failure: bool | None
    ecc_uncorrected_volatile: int | None
    read_at: datetime | None  # None: the GPU has never been read
    stale: bool  # the reading is older than the caller's limit
    job_id: str | None
    task: str | None
    job_owner: str | None


@dataclass(frozen=True, slots=True)
class LiveTaskRow:
    job_id: str
    task: str
    gpu_indices: list[int]
    state: str
    attempt_no: int
    started_at: datetime | None
    created_at: datetime
    username: str
    job_name: str


class NodesPageRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def heatmap_gpus(self, node_id: str | None, stale_after_s: float) -> list[HeatmapGpuRow]:
        """Every GPU (``node_id``: that node's), in node then index order."""
        rows = await self._db.fetch(SQL.nodes_heatmap_gpus, node_id, stale_after_s)
        return [HeatmapGpuRow._make(r) for r in rows]

    async def live_tasks(self, node_id: str) -> list[LiveTaskRow]:
        return [LiveTaskRow(**r) for r in await self._db.fetch(SQL.nodes_live_tasks, node_id)]
