"""The nodes pages through the app: each GPU's cell says what its reading means (busy,
idle, free, unhealthy, no data), drained and unreachable nodes stand out, simulated GPUs
say so; a node's page lists its GPUs and tasks; drain is an admin's request with a CSRF
token, recorded for the monitor."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.monitor.registration import register_nodes
from services.monitor.repository import HistoryRow, write_history
from shared.db.pool import Database
from shared.events.nodes import GpuSample, NodeTelemetryData
from shared.ids import new_attempt_id
from shared.jobs import JobSpec
from tests.portal.conftest import Browser

H100 = "NVIDIA H100 80GB HBM3"


@dataclass
class NodeCell:
    classes: set[str]
    badges: list[str] = field(default_factory=list)
    gpus: dict[int, tuple[set[str], str]] = field(default_factory=dict)  # classes, label

    def gpu_classes(self) -> dict[int, set[str]]:
        return {index: classes for index, (classes, _) in self.gpus.items()}

    def label(self, index: int) -> str:
        return self.gpus[index][1]


class Heatmap(HTMLParser):
    """The heat map as a browser would see it: per node, its classes and badges, and per
    GPU cell its classes (beyond ``gpu``) and accessible label."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[str, NodeCell] = {}
        self._node: NodeCell | None = None
        self._badge: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        classes = set((found.get("class") or "").split())
        if tag == "article" and "node-cell" in classes:
            self._node = self.nodes[found["data-node"] or ""] = NodeCell(classes)
        elif self._node and "data-gpu" in found and "gpu" in classes:
            assert found.get("role") == "img"
            label = found.get("title") or ""
            assert label, "a GPU cell is named, for screen readers (role=img) and on hover"
            self._node.gpus[int(found["data-gpu"] or -1)] = (classes - {"gpu"}, label)
        elif self._node and tag == "span" and "badge" in classes:
            self._badge = []

    def handle_data(self, data: str) -> None:
        if self._badge is not None:
            self._badge.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self._badge is not None and self._node:
            self._node.badges.append("".join(self._badge).strip())
            self._badge = None
        if tag == "article":
            self._node = None


def heatmap(page: str) -> dict[str, NodeCell]:
    parser = Heatmap()
    parser.feed(page)
    return parser.nodes


async def _register(db: Database, node_id: str, gpus: list[GpuSample], simulated: bool = False) -> None:
    data = NodeTelemetryData(
        node_id=node_id, hostname=f"{node_id}.lab", simulated=simulated, interval_s=1.0, gpus=gpus
    )
    async with db.transaction() as conn:
        await register_nodes(conn, [data])


def _gpu(index: int, **readings: object) -> GpuSample:
    return GpuSample(index=index, uuid=f"GPU-{index}", model=H100, memory_total_mb=81_920, **readings)


async def _running_job(db: Database, username: str, node_id: str, gpu_indices: list[int]) -> str:
    """A job of ``username`` whose one task runs on ``node_id``'s ``gpu_indices``."""
    spec = JobSpec.model_validate(
        {
            "name": "train",
            "tasks": [{"name": "worker", "command": "python t.py", "resources": {"gpus": len(gpu_indices)}}],
        }
    )
    job_id = (await Submitter(JobRepository(db)).submit(spec, username, None)).job.id
    await db.execute("UPDATE api.jobs SET state = 'RUNNING', generation = 1 WHERE id = $1", job_id)
    await db.execute(
        "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no, node_id,"
        " gpu_indices, state, started_at) VALUES ($1, $2, 1, 'worker', 0, 1, $3, $4, 'RUNNING', now())",
        new_attempt_id(),
        job_id,
        node_id,
        gpu_indices,
    )
    return job_id


async def _cluster(db: Database) -> str:
    """n1: busy (job), idle (job), free, Xid, no reading, stale. n2: drained, simulated;
    free, lost, failed row remap, uncorrectable ECC errors.
    n3: unreachable. Returns the job on n1."""
    await _register(
        db,
        "n1",
        [
            _gpu(0, utilization_pct=97.0, memory_used_mb=40_960, temperature_c=61.0),
            _gpu(1, utilization_pct=2.0, memory_used_mb=1024),
            _gpu(2, utilization_pct=0.0),
            _gpu(3, utilization_pct=99.0, last_xid=79, xid_count=1),
            _gpu(4, utilization_pct=50.0),
            _gpu(5, utilization_pct=50.0),
        ],
    )
    await db.execute("DELETE FROM monitor.gpu_readings WHERE node_id = 'n1' AND index = 4")
    await db.execute(
        "UPDATE monitor.gpu_readings SET updated_at = now() - interval '10 minutes'"
        " WHERE node_id = 'n1' AND index = 5"
    )
    job_id = await _running_job(db, "alice", "n1", [0, 1])
    await _register(
        db,
        "n2",
        [
            _gpu(0, utilization_pct=0.0),
            _gpu(1, lost=True),
            _gpu(2, utilization_pct=0.0, remap_failure=True),
            _gpu(3, utilization_pct=0.0, ecc_uncorrected_volatile=2),
        ],
        simulated=True,
    )
    await db.execute(
        "UPDATE monitor.nodes SET drained_at = now(), drain_reason = 'swap PSU', drained_by = 'root'"
        " WHERE id = 'n2'"
    )
    await _register(db, "n3", [_gpu(0, utilization_pct=80.0)])
    await db.execute("UPDATE monitor.nodes SET state = 'UNREACHABLE' WHERE id = 'n3'")
    return job_id


async def test_each_gpu_cell_says_what_its_reading_means(portal: Browser, db: Database) -> None:
    job_id = await _cluster(db)
    page = await portal.get("/nodes")
    assert page.status_code == 200, page.text
    nodes = heatmap(page.text)
    assert list(nodes) == ["n1", "n2", "n3"]
    n1 = nodes["n1"]
    assert n1.gpu_classes() == {
        0: {"busy"},
        1: {"idle"},
        2: set(),
        3: {"unhealthy"},
        4: {"nodata"},
        5: {"nodata"},
    }
    assert n1.label(0) == f"n1 GPU 0: busy; H100; 97%; 40.0/80 GB; healthy; job {job_id} worker-0"
    assert n1.label(2) == "n1 GPU 2: free; H100; 0%; 80 GB; healthy; no job"
    assert "unhealthy: Xid 79" in n1.label(3)
    assert n1.label(4) == "n1 GPU 4: no data; H100; no reading; 80 GB; healthy; no job"
    assert "(stale)" in n1.label(5)
    n2, n3 = nodes["n2"], nodes["n3"]
    assert "drained" in n2.classes
    assert "unreachable" not in n2.classes
    assert n2.badges == ["drained", "simulated", "unknown"]
    assert n2.gpu_classes() == {0: set(), 1: {"unhealthy"}, 2: {"unhealthy"}, 3: {"unhealthy"}}
    assert "unhealthy: row remapping failed;" in n2.label(2)
    assert "unhealthy: 2 uncorrectable ECC errors;" in n2.label(3)
    lost = (
        "n2 GPU 1: unhealthy; H100 simulated; no reading; 80 GB; unhealthy: lost (fell off the bus); no job"
    )
    assert n2.label(1) == lost
    assert "unreachable" in n3.classes
    assert n3.badges == ["unreachable", "unknown"]
    assert n3.gpu_classes() == {0: {"nodata"}}
    assert "busy: 1 " in page.text
    assert "no data: 3 " in page.text
    assert "unhealthy: 4 " in page.text


async def test_the_heatmap_refreshes_itself_through_the_same_route(portal: Browser, db: Database) -> None:
    await _cluster(db)
    page = await portal.get("/nodes")
    assert 'sse-connect="/live/nodes?after=' in page.text
    assert 'hx-get="/nodes" hx-trigger="sse:changed"' in page.text
    panel = await portal.get("/nodes", headers={"HX-Request": "true"})
    assert panel.status_code == 200
    assert "<html" not in panel.text
    assert heatmap(panel.text) == heatmap(page.text)


async def test_a_node_page_lists_its_gpus_tasks_drain_and_isolation(portal: Browser, db: Database) -> None:
    job_id = await _cluster(db)
    await db.execute(
        "INSERT INTO launcher.agents (node_id, epoch, lease_expires_at, isolation, isolation_detail)"
        " VALUES ('n1', 1, now() + interval '1 minute', 'sandbox', 'a uid, namespaces and cgroups per task')"
    )
    page = await portal.get("/nodes/n1")
    assert page.status_code == 200, page.text
    rows = table_rows(page.text, "node-gpus")
    assert [r[:2] for r in rows] == [
        ["0", "busy"],
        ["1", "idle"],
        ["2", "free"],
        ["3", "unhealthy"],
        ["4", "no data"],
        ["5", "no data"],
    ]
    assert rows[0][3:5] == ["97%", "40.0 / 80 GB"]
    assert rows[0][5] == "61 °C"
    assert rows[3][6:8] == ["unhealthy: Xid 79", "79"]
    assert rows[0][8] == f"{job_id} worker-0"
    tasks = table_rows(page.text, "node-tasks")
    assert [t[1:4] for t in tasks] == [["worker-0", "0, 1", "running"]]
    assert tasks[0][0].startswith(job_id)
    assert f'href="/jobs/{job_id}"' in page.text
    assert "sandbox" in page.text
    assert "a uid, namespaces and cgroups per task" in page.text
    assert "not drained" in page.text

    drained = await portal.get("/nodes/n2")
    assert "drained by root" in drained.text
    assert "swap PSU" in drained.text
    assert "simulated GPUs" in drained.text
    assert 'action="/nodes/n2/undrain"' in drained.text


async def test_a_node_page_charts_its_gpus_utilisation_over_the_last_hour(
    portal: Browser, db: Database
) -> None:
    await _cluster(db)
    assert 'class="chart"' not in (await portal.get("/nodes/n1")).text  # no history yet
    now = datetime.now(UTC).replace(microsecond=0)
    rows = [
        HistoryRow(
            now - timedelta(seconds=10 * k), "n1", gpu, None, 10, 40.0 + gpu + k, 50.0, 1000, 40.0, 300.0
        )
        for gpu in (0, 1)
        for k in range(3)
    ]
    rows.append(HistoryRow(now - timedelta(hours=2), "n1", 0, None, 10, 99.0, 99.0, 1000, 40.0, 300.0))
    async with db.transaction() as conn:
        await write_history(conn, 10, rows[1:])  # GPU 0 has no bucket at the newest moment
    page = await portal.get("/nodes/n1")
    found = re.search(r"data-chart='([^']+)'", page.text)
    assert found is not None
    chart = json.loads(html.unescape(found.group(1)))
    stamps = [int((now - timedelta(seconds=10 * k)).timestamp()) for k in (2, 1, 0)]
    assert chart["x"] == stamps  # the last hour only, oldest first
    assert chart["series"] == [
        {"label": "GPU 0", "values": [42.0, 41.0, None]},
        {"label": "GPU 1", "values": [43.0, 42.0, 41.0]},
    ]
    assert (chart["unit"], chart["max"]) == ("%", 100)


async def test_another_users_job_is_named_but_not_linked(
    browser_for: Callable[[str, str], Awaitable[Browser]], db: Database
) -> None:
    job_id = await _cluster(db)
    bob = await browser_for("bob", "user")
    page = await bob.get("/nodes/n1")
    assert page.status_code == 200
    assert job_id in page.text
    assert f'href="/jobs/{job_id}"' not in page.text
    assert "/drain" not in page.text  # no drain form for a user


async def test_unknown_and_hostile_nodes(portal: Browser, db: Database) -> None:
    missing = await portal.get("/nodes/no-such-node")
    assert missing.status_code == 404
    assert "no node 'no-such-node'" in html.unescape(missing.text)
    assert '<main id="main"' in missing.text  # the portal's page, not a problem document
    assert (await portal.get("/nodes/a%20b")).status_code == 422


async def test_drain_is_an_admins_request_with_a_csrf_token(
    portal: Browser, browser_for: Callable[[str, str], Awaitable[Browser]], db: Database
) -> None:
    await _cluster(db)

    async def drain_requests() -> list[bytes]:
        rows = await db.fetch("SELECT payload FROM corral.outbox WHERE subject LIKE 'corral.node.drain%'")
        return [bytes(r["payload"]) for r in rows]

    await portal.get("/nodes/n1")
    forged = await portal.post("/nodes/n1/drain", {"reason": "x"}, csrf=False)
    assert forged.status_code == 403
    assert "CSRF" in forged.text
    too_long = await portal.post("/nodes/n1/drain", {"reason": "x" * 501})
    assert too_long.status_code == 422
    assert "reason" in too_long.text
    assert "at most 500 characters" in too_long.text
    bob = await browser_for("bob", "user")
    await bob.get("/nodes/n1")
    refused = await bob.post("/nodes/n1/drain", {"reason": "mine"})
    assert refused.status_code == 403
    assert "admin" in refused.text
    assert await drain_requests() == []

    accepted = await portal.post("/nodes/n1/drain", {"reason": "swap PSU"})
    assert accepted.status_code == 303
    assert accepted.headers["location"] == "/nodes/n1?requested=drain"
    (payload,) = await drain_requests()
    assert b'"reason":"swap PSU"' in payload
    assert b'"drain":true' in payload
    assert b'"requested_by":"root"' in payload
    shown = await portal.get(accepted.headers["location"])
    assert "Drain requested" in shown.text


def table_rows(page: str, table_class: str) -> list[list[str]]:
    """The text of each body cell of the table with that class."""

    class Rows(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.rows: list[list[str]] = []
            self.inside = self.body = False
            self.cell: list[str] | None = None

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "table" and table_class in (dict(attrs).get("class") or "").split():
                self.inside = True
            elif self.inside and tag == "tbody":
                self.body = True
            elif self.body and tag == "tr":
                self.rows.append([])
            elif self.body and tag == "td":
                self.cell = []

        def handle_data(self, data: str) -> None:
            if self.cell is not None:
                self.cell.append(data)

        def handle_endtag(self, tag: str) -> None:
            if tag == "td" and self.cell is not None:
                self.rows[-1].append(" ".join("".join(self.cell).split()))
                self.cell = None
            elif tag == "table" and self.inside:
                self.inside = self.body = False

    parser = Rows()
    parser.feed(page)
    return parser.rows
