"""Fractions of a GPU in the live policy: shares pack onto GPUs already shared before a
fresh one is opened, only on nodes that share, never across GPUs, never under a whole-GPU
job; quotas count them as the fractions they are; a share that cannot run says why.
The last test writes a cycle's shares to real Postgres and reads them back."""

from __future__ import annotations

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.scheduler.decisions import commit_decisions
from services.scheduler.model import (
    NodeCapacity,
    PendingJob,
    RunningJob,
    TaskDemand,
    VirtualCluster,
    task_demand,
)
from services.scheduler.planner import plan
from services.scheduler.snapshot import load_snapshot
from shared.db.pool import Database
from shared.jobs import JobSpec
from tests.scheduler.test_queue_order import _ready_node


def _share(
    job_id: str, gpus: float, instances: int = 1, topology: str = "pack", vc: str = "default"
) -> PendingJob:
    return PendingJob(
        job_id,
        1,
        0,
        (task_demand("w", instances, gpus),),
        vc=vc,
        topology=topology,  # type: ignore[arg-type]
    )


def _node(
    node_id: str, gpus: int = 2, sharing: bool = True, shares: dict[int, int] | None = None
) -> NodeCapacity:
    shares = dict(shares or {})
    free = [g for g in range(gpus) if g not in shares]
    return NodeCapacity(node_id, free, total_gpus=gpus, gpu_type="H100", sharing=sharing, shares=shares)


def _placed(result_plan: object) -> dict[str, list[tuple[str, tuple[int, ...], int]]]:
    return {
        d.job.job_id: [(p.node_id, p.gpu_indices, p.gpu_milli) for p in d.placements]
        for d in result_plan.decisions  # type: ignore[attr-defined]
    }


def test_two_halves_share_one_gpu_and_a_third_opens_the_next() -> None:
    nodes = [_node("n1")]
    placed = _placed(plan([_share("a", 0.5), _share("b", 0.5), _share("c", 0.5)], nodes))
    assert placed == {"a": [("n1", (0,), 500)], "b": [("n1", (0,), 500)], "c": [("n1", (1,), 500)]}
    assert nodes[0].shares == {0: 1000, 1: 500}
    assert nodes[0].free_gpus == []


def test_a_share_goes_to_the_shared_gpu_with_least_room_that_holds_it() -> None:
    # GPU 0 has 0.7 free, GPU 1 has 0.4 free, GPU 2 is free: 0.3 goes to GPU 1 (best fit),
    # and 0.6 to GPU 0; neither opens GPU 2.
    nodes = [_node("n1", gpus=3, shares={0: 300, 1: 600})]
    placed = _placed(plan([_share("a", 0.3), _share("b", 0.6)], nodes))
    assert placed == {"a": [("n1", (1,), 300)], "b": [("n1", (0,), 600)]}
    assert nodes[0].free_gpus == [2]


def test_whole_gpu_jobs_never_land_on_a_shared_gpu() -> None:
    nodes = [_node("n1", gpus=2, shares={0: 100})]
    whole = PendingJob("w", 1, 0, (TaskDemand("w", 1, 2),))
    result = plan([whole, PendingJob("one", 1, 0, (TaskDemand("w", 1, 1),))], nodes)
    assert _placed(result) == {"one": [("n1", (1,), 0)]}
    assert [w.job_id for w in result.waiting] == ["w"]


def test_a_new_share_opens_a_gpu_on_the_sharing_node_with_fewest_free() -> None:
    nodes = [_node("roomy", gpus=8), _node("busy", gpus=8, shares=dict.fromkeys(range(6), 1000))]
    assert _placed(plan([_share("a", 0.25)], nodes)) == {"a": [("busy", (6,), 250)]}


def test_fractions_wait_where_no_pool_shares_and_say_so() -> None:
    result = plan([_share("a", 0.5)], [_node("n1", sharing=False)])
    assert not result.decisions
    (waiting,) = result.waiting
    assert waiting.reason == "InsufficientGPUs"
    assert "no ready node pool shares its GPUs" in waiting.detail
    assert "0.5" in waiting.detail


def test_a_full_sharing_pool_says_no_shared_gpu_has_room() -> None:
    result = plan([_share("a", 0.6)], [_node("n1", gpus=1, shares={0: 500})])
    (waiting,) = result.waiting
    assert waiting.reason == "InsufficientGPUs"
    assert "no shared GPU has that much room" in waiting.detail


def test_one_per_node_puts_each_share_on_a_node_of_its_own() -> None:
    nodes = [_node(f"n{i}", gpus=1) for i in range(4)]
    (decision,) = plan([_share("a", 0.3, instances=4, topology="one_per_node")], nodes).decisions
    assert sorted(p.node_id for p in decision.placements) == ["n0", "n1", "n2", "n3"]
    assert {p.gpu_milli for p in decision.placements} == {300}


def test_a_packed_gang_of_shares_keeps_to_its_own_gpu_first() -> None:
    nodes = [_node("n1", gpus=2), _node("n2", gpus=2)]
    (decision,) = plan([_share("a", 0.25, instances=4)], nodes).decisions
    assert {(p.node_id, p.gpu_indices) for p in decision.placements} == {("n1", (0,))}


def test_quotas_count_shares_as_fractions() -> None:
    vcs = {"team": VirtualCluster("team", {"H100": 1})}
    nodes = [_node("n1", gpus=4)]
    result = plan([_share(f"j{i}", 0.5, vc="team") for i in range(3)], nodes, vcs=vcs)
    assert [(d.job.job_id, d.borrowed) for d in result.decisions] == [
        ("j0", False),
        ("j1", False),
        ("j2", True),  # the quota's one GPU is two halves: the third borrows
    ]


def test_running_shares_count_against_the_quota_and_a_borrowed_one_is_reclaimed() -> None:
    vcs = {"team": VirtualCluster("team", {"H100": 1}), "other": VirtualCluster("other", {})}
    nodes = [_node("n1", gpus=1, shares={0: 500})]
    share = RunningJob(
        "s", "other", "u", 0, "H100", (("n1", (0,)),), borrowed=True, runtime_s=1e6, shares=(500,)
    )
    assert share.gpus == 0.5
    result = plan(
        [PendingJob("whole", 1, 5, (TaskDemand("w", 1, 1),), vc="team")], nodes, running=[share], vcs=vcs
    )
    assert not result.decisions
    assert [p.job_id for p in result.preemptions] == ["s"]  # the team's quota is its own
    assert nodes[0].shares == {0: 500}


async def test_a_cycle_writes_shares_and_the_next_reads_them_back(db: Database) -> None:
    await _ready_node(db, gpus=2)
    await db.execute("UPDATE monitor.nodes SET gpu_sharing = 'timeslice'")
    spec = JobSpec.model_validate(
        {
            "name": "half",
            "tasks": [
                {"name": "w", "command": "x", "resources": {"gpus": 0.5, "cpus": 2, "memory_mb": 1000}}
            ],
        }
    )
    api = Submitter(JobRepository(db))
    first = (await api.submit(spec, "alice", None)).job.id
    second = (await api.submit(spec, "bob", None)).job.id
    async with db.transaction() as conn:
        snapshot = await load_snapshot(conn, 10)
        assert snapshot.nodes["n1"].sharing
        assert await commit_decisions(conn, plan(snapshot.pending, snapshot.nodes).decisions) == 2
    rows = await db.fetch("SELECT job_id, gpu_indices, gpu_milli FROM scheduler.allocations ORDER BY job_id")
    assert {(r["job_id"], tuple(r["gpu_indices"]), r["gpu_milli"]) for r in rows} == {
        (first, (0,), 500),
        (second, (0,), 500),
    }
    third = (await api.submit(spec, "carol", None)).job.id
    async with db.transaction() as conn:
        snapshot = await load_snapshot(conn, 10)
        assert snapshot.nodes["n1"].shares == {0: 1000}
        assert snapshot.nodes["n1"].free_gpus == [1]
        assert sorted(r.gpus for r in snapshot.running) == [0.5, 0.5]
        # What each running task asked, which placement weighs stranding against.
        assert {(r.slice_asks, r.asked_type) for r in snapshot.running} == {(((2.0, 1000),), None)}
        (decision,) = plan(snapshot.pending, snapshot.nodes).decisions
    assert decision.job.job_id == third
    assert decision.placements[0].gpu_indices == (1,)


async def test_a_mig_node_offers_its_devices_as_gpus_of_their_own_type(db: Database) -> None:
    await _ready_node(db, gpus=3)
    await db.execute(
        "UPDATE monitor.gpus SET model = 'NVIDIA H100 80GB HBM3 MIG 1g.10gb', uuid = 'MIG-' || index"
    )
    await db.execute("UPDATE monitor.nodes SET gpu_sharing = 'mig'")
    spec = JobSpec.model_validate(
        {
            "name": "slice",
            "tasks": [
                {
                    "name": "w",
                    "instances": 2,
                    "command": "x",
                    "resources": {"gpus": 1, "gpu_type": "H100-1g.10gb"},
                }
            ],
        }
    )
    job = (await Submitter(JobRepository(db)).submit(spec, "alice", None)).job.id
    async with db.transaction() as conn:
        snapshot = await load_snapshot(conn, 10)
        node = snapshot.nodes["n1"]
        assert node.gpu_type == "H100-1G.10GB"
        assert not node.sharing  # MIG devices are placed whole: no fractions on them
        (decision,) = plan(snapshot.pending, snapshot.nodes).decisions
        await commit_decisions(conn, [decision])
    assert decision.job.job_id == job
    assert sorted(p.gpu_indices for p in decision.placements) == [(0,), (1,)]
    async with db.transaction() as conn:
        (running,) = (await load_snapshot(conn, 10)).running
    assert running.asked_type == "H100-1G.10GB"  # as a pending job's: upper case
