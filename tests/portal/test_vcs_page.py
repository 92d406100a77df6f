"""The virtual-clusters page through the app: per VC and GPU type, the quota, the GPUs
held, how many are borrowed, what waiting jobs ask for and who holds them; users see
only the VCs open to them, and other users counted, not named."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from html.parser import HTMLParser

from services.api.cluster.repository import ClusterRepository
from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from shared.db.pool import Database
from shared.jobs import JobSpec
from tests.api.test_vcs_api import _nodes, _spec
from tests.portal.conftest import Browser

H100 = "NVIDIA H100 80GB HBM3"


async def _job(db: Database, username: str, vc: str, gpus: int, gpu_type: str | None = None) -> str:
    fields = _spec(gpus, virtual_cluster=vc)
    if gpu_type is not None:
        fields = _spec(gpus, virtual_cluster=vc, gpu_type=gpu_type)
    spec = JobSpec.model_validate(fields)
    return (await Submitter(JobRepository(db)).submit(spec, username, None)).job.id


async def _placed(db: Database, job_id: str, node_id: str, gpu_indices: list[int], borrowed: bool) -> None:
    """The job placed by the scheduler on ``node_id``, within its VC's quota or borrowed."""
    await db.execute("UPDATE api.jobs SET state = 'RUNNING', generation = 1 WHERE id = $1", job_id)
    await db.execute(
        "INSERT INTO scheduler.allocations (job_id, generation, task_role, task_index, node_id, gpu_indices,"
        " borrowed) VALUES ($1, 1, 'main', 0, $2, $3, $4)",
        job_id,
        node_id,
        gpu_indices,
        borrowed,
    )


async def _cluster(db: Database) -> None:
    """vision: 8 H100 guaranteed; alice holds 6 of them, bob 2 plus 2 borrowed; carol waits
    for 3 H100 in one job, dan for 1 GPU of any type in two. secret: admins only."""
    await _nodes(db, ("n0", 8, H100), ("n1", 8, H100))
    repo = ClusterRepository(db)
    await repo.put_vc("vision", "computer vision", {"H100": 8}, 4, "root")
    await repo.put_vc("secret", "", {"A100": 2}, None, "root", [], set_access=True)
    await _placed(db, await _job(db, "alice", "vision", 6), "n0", [0, 1, 2, 3, 4, 5], False)
    await _placed(db, await _job(db, "bob", "vision", 2), "n0", [6, 7], False)
    await _placed(db, await _job(db, "bob", "vision", 2), "n1", [0, 1], True)
    await _job(db, "carol", "vision", 3, gpu_type="h100")
    await _job(db, "dan", "vision", 1)
    await _job(db, "dan", "vision", 1)


class VcTables(HTMLParser):
    """Per VC section: its rows, each the text of its cells (header cell first)."""

    def __init__(self) -> None:
        super().__init__()
        self.vcs: dict[str, list[list[str]]] = {}
        self._vc: str | None = None
        self._body = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "section" and found.get("data-vc"):
            self._vc = found["data-vc"]
            self.vcs[self._vc or ""] = []
        elif self._vc and tag == "tbody":
            self._body = True
        elif self._body and tag == "tr":
            self.vcs[self._vc or ""].append([])
        elif self._body and tag in ("td", "th"):
            self._cell = []

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._vc:
            self.vcs[self._vc][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tbody":
            self._body = False
        elif tag == "section":
            self._vc = None


def vc_tables(page: str) -> dict[str, list[list[str]]]:
    parser = VcTables()
    parser.feed(page)
    return parser.vcs


async def test_an_admin_sees_quota_use_borrowing_demand_and_holders(portal: Browser, db: Database) -> None:
    await _cluster(db)
    page = await portal.get("/virtual-clusters")
    assert page.status_code == 200, page.text
    tables = vc_tables(page.text)
    assert list(tables) == ["default", "secret", "vision"]
    assert tables["vision"] == [
        ["H100", "8", "10", "2", "3 (1 job)", "alice 6 · bob 4"],
        ["any type", "—", "0", "0", "2 (2 jobs)", "nobody"],
    ]
    assert tables["secret"] == [["A100", "2", "0", "0", "0", "nobody"]]
    assert tables["default"] == [["No quota, nothing held, nothing waiting."]]
    assert "at most 4 GPUs per user" in page.text
    assert "admins only" in page.text


async def test_a_user_sees_the_vcs_open_to_them_and_only_their_own_share(
    browser_for: Callable[[str, str], Awaitable[Browser]], db: Database
) -> None:
    await _cluster(db)
    bob = await browser_for("bob", "user")
    tables = vc_tables((await bob.get("/virtual-clusters")).text)
    assert list(tables) == ["default", "vision"]
    assert tables["vision"][0] == ["H100", "8", "10", "2", "3 (1 job)", "you 4 · 1 other user 6"]
    erin = await browser_for("erin", "user")
    page = await erin.get("/virtual-clusters")
    assert vc_tables(page.text)["vision"][0][-1] == "2 other users 10"
    assert "alice" not in page.text


async def test_the_panel_refreshes_itself_through_the_same_route(portal: Browser, db: Database) -> None:
    await _cluster(db)
    page = await portal.get("/virtual-clusters")
    assert 'sse-connect="/live/cluster?after=' in page.text
    panel = await portal.get("/virtual-clusters", headers={"HX-Request": "true"})
    assert "<html" not in panel.text
    assert vc_tables(panel.text) == vc_tables(page.text)
