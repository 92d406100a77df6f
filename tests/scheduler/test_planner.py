"""The live policy: quotas, borrowing and reclaim, priority, fair share, backfill, types.

Each test is one cycle over a hand-made snapshot (``plan`` is pure), with the numbers
small enough to check by hand; test_planner_properties.py runs random ones.
"""

from __future__ import annotations

from services.scheduler.model import NodeCapacity, PendingJob, RunningJob, TaskDemand, VirtualCluster
from services.scheduler.planner import PlanSettings, plan


def node(name: str, free: int, total: int = 8, gpu_type: str = "H100") -> NodeCapacity:
    return NodeCapacity(name, list(range(total - free, total)), total_gpus=total, gpu_type=gpu_type)


def job(job_id: str, gpus: int, instances: int = 1, **fields: object) -> PendingJob:
    return PendingJob(job_id, 1, tasks=(TaskDemand("main", instances, gpus),), **{"priority": 0, **fields})  # type: ignore[arg-type]


def running(job_id: str, node_id: str, gpus: int, first: int = 0, **fields: object) -> RunningJob:
    slices = ((node_id, tuple(range(first, first + gpus))),)
    defaults: dict[str, object] = {"vc": "default", "user": "u", "priority": 0, "gpu_type": "H100"}
    return RunningJob(job_id, slices=slices, **{**defaults, **fields})  # type: ignore[arg-type]


VCS = {
    "a": VirtualCluster("a", {"H100": 8}),
    "b": VirtualCluster("b", {"H100": 8}),
    "default": VirtualCluster("default"),
}


def test_within_quota_is_guaranteed_and_beyond_it_borrows_idle_gpus() -> None:
    result = plan([job("in", 8, vc="a"), job("over", 4, vc="a")], [node("n0", 8), node("n1", 8)], vcs=VCS)
    assert {(d.job.job_id, d.borrowed) for d in result.decisions} == {("in", False), ("over", True)}


def test_a_vc_takes_its_quota_back_from_borrowers_at_once() -> None:
    # b's job borrows all of n0 (a's share of the cluster); a's job, within quota, reclaims.
    borrower = running("b1", "n0", 8, vc="b", borrowed=True, priority=100, runtime_s=1)
    result = plan([job("a1", 4, vc="a")], [node("n0", 0)], running=[borrower], vcs=VCS)
    assert result.decisions == []
    assert [(p.job_id, p.for_job) for p in result.preemptions] == [("b1", "a1")]
    [waiting] = result.waiting
    assert waiting.reason == "WaitingForPreemption"
    assert waiting.estimated_start_s == 0.0
    # Next cycle, b1 is still stopping: nothing more is preempted, a1 still waits for it.
    stopping = running("b1", "n0", 8, vc="b", borrowed=True, priority=100, preempting=True)
    again = plan([job("a1", 4, vc="a")], [node("n0", 0)], running=[stopping], vcs=VCS)
    assert again.preemptions == []
    assert again.waiting[0].reason == "WaitingForPreemption"


def test_reclaim_takes_the_cheapest_borrowers_only() -> None:
    borrowers = [
        running("old", "n0", 4, vc="b", borrowed=True, runtime_s=5000),
        running("new", "n0", 4, first=4, vc="b", borrowed=True, runtime_s=10),
        running("high", "n1", 8, vc="b", borrowed=True, priority=9, runtime_s=10),
    ]
    result = plan([job("a1", 4, vc="a")], [node("n0", 0), node("n1", 0)], running=borrowers, vcs=VCS)
    assert [p.job_id for p in result.preemptions] == ["new"]  # lowest priority, least progress lost


def test_another_vcs_guaranteed_jobs_are_never_preempted() -> None:
    owner = running("b1", "n0", 8, vc="b", priority=-5, runtime_s=10_000)  # within b's quota
    result = plan([job("a1", 4, vc="a", priority=10)], [node("n0", 0)], running=[owner], vcs=VCS)
    assert result.preemptions == []
    assert result.waiting[0].reason == "InsufficientGPUs"


def test_priority_preempts_inside_a_vc_only_after_the_minimum_runtime() -> None:
    low = running("low", "n0", 8, vc="a", priority=0, runtime_s=10)
    settings = PlanSettings(min_runtime_s=60)
    young = plan(
        [job("high", 8, vc="a", priority=5)], [node("n0", 0)], running=[low], vcs=VCS, settings=settings
    )
    assert young.preemptions == []
    assert young.waiting[0].reason == "WaitingForQuota"
    old = running("low", "n0", 8, vc="a", priority=0, runtime_s=61)
    later = plan(
        [job("high", 8, vc="a", priority=5)], [node("n0", 0)], running=[old], vcs=VCS, settings=settings
    )
    assert [p.job_id for p in later.preemptions] == ["low"]


def test_without_quotas_priority_preempts_lower_borrowed_jobs() -> None:
    low = running("low", "n0", 8, priority=0, borrowed=True, runtime_s=1000)
    result = plan([job("urgent", 8, priority=3)], [node("n0", 0)], running=[low], vcs=VCS)
    assert [p.job_id for p in result.preemptions] == ["low"]
    equal = plan([job("same", 8, priority=0)], [node("n0", 0)], running=[low], vcs=VCS)
    assert equal.preemptions == []


def test_fair_share_serves_the_user_with_fewer_gpus_first() -> None:
    busy_user = running("x0", "n0", 4, vc="a", user="x")
    result = plan(
        [job("x1", 4, vc="a", user="x"), job("y1", 4, vc="a", user="y")],
        [node("n0", 4, total=8), node("n1", 0)],
        running=[busy_user],
        vcs={"a": VirtualCluster("a", {"H100": 16})},
    )
    assert [d.job.job_id for d in result.decisions] == ["y1"]
    assert [(w.job_id, w.reason) for w in result.waiting] == [("x1", "Priority")]


def test_a_user_limit_holds_jobs_back() -> None:
    vcs = {"a": VirtualCluster("a", {"H100": 16}, max_gpus_per_user=8)}
    result = plan(
        [job("x1", 4, vc="a", user="x")],
        [node("n0", 8)],
        running=[running("x0", "n1", 6, vc="a", user="x")],
        vcs=vcs,
    )
    [waiting] = result.waiting
    assert waiting.reason == "UserLimit"
    assert waiting.detail == (
        "user x holds 6 GPUs in virtual cluster a, whose limit per user is 8; this job needs 4 more"
    )


def test_backfill_only_what_ends_before_the_reserved_job_can_start() -> None:
    nodes = [node("n0", 0), node("n1", 4)]
    busy = [
        running("r0", "n0", 8, max_runtime_s=100, runtime_s=0),
        running("r1", "n1", 4, max_runtime_s=200, runtime_s=0),
    ]
    result = plan(
        [job("big", 8, instances=2), job("long", 4, max_runtime_s=300), job("short", 4, max_runtime_s=150)],
        nodes,
        running=busy,
    )
    assert [d.job.job_id for d in result.decisions] == ["short"]
    reasons = {w.job_id: (w.reason, w.estimated_start_s) for w in result.waiting}
    assert reasons["big"] == ("InsufficientGPUs", 200.0)
    assert reasons["long"][0] == "Priority"


def test_without_limits_nothing_jumps_a_reservation() -> None:
    result = plan(
        [job("big", 8, instances=2), job("small", 4, max_runtime_s=10)],
        [node("n0", 0), node("n1", 4)],
        running=[running("r0", "n0", 8), running("r1", "n1", 4)],
    )
    assert result.decisions == []
    assert [w.estimated_start_s for w in result.waiting] == [None, None]


def test_gpu_types_and_quota_per_type() -> None:
    nodes = [node("h", 8, gpu_type="H100"), node("a", 8, gpu_type="A100")]
    vcs = {"v": VirtualCluster("v", {"A100": 8})}
    result = plan([job("wants-h100", 4, vc="v", gpu_type="H100"), job("any", 8, vc="v")], nodes, vcs=vcs)
    where = {d.job.job_id: (d.placements[0].node_id, d.borrowed) for d in result.decisions}
    assert where == {"wants-h100": ("h", True), "any": ("a", False)}  # guaranteed where the quota is


def test_a_type_no_ready_node_has() -> None:
    result = plan([job("j", 1, gpu_type="B200")], [node("n0", 8)])
    assert (result.waiting[0].reason, result.waiting[0].detail) == (
        "GangDoesNotFit",
        "no ready node has GPUs of type B200",
    )


def test_topology_constraints() -> None:
    nodes = [node("n0", 4), node("n1", 4), node("n2", 8)]
    together = plan([job("one", 2, instances=3, topology="single_node")], nodes)
    assert {p.node_id for p in together.decisions[0].placements} == {"n2"}
    spread = plan(
        [job("spread", 2, instances=3, topology="one_per_node")],
        [node("n0", 4), node("n1", 4), node("n2", 8)],
    )
    assert len({p.node_id for p in spread.decisions[0].placements}) == 3
    packed = plan([job("pack", 4, instances=3)], [node("n0", 4), node("n1", 4), node("n2", 8)])
    assert sorted(p.node_id for p in packed.decisions[0].placements) == ["n0", "n2", "n2"]


def test_estimated_start_from_the_running_jobs_limits() -> None:
    result = plan(
        [job("next", 8), job("after", 8, max_runtime_s=50), job("then", 8)],
        [node("n0", 0)],
        running=[running("r", "n0", 8, max_runtime_s=100, runtime_s=40)],
    )
    assert [w.estimated_start_s for w in result.waiting] == [60.0, None, None]


def test_a_fragmented_job_is_not_expected_to_start_now() -> None:
    """8 GPUs free, 4 on each node: the gang waits for a running job to end, not for nothing."""
    settings = PlanSettings(move_to_defragment=False)
    limited = [running("r0", "n0", 4, max_runtime_s=100, runtime_s=70), running("r1", "n1", 4)]
    result = plan([job("gang", 8)], [node("n0", 4), node("n1", 4)], running=limited, settings=settings)
    assert [(w.reason, w.estimated_start_s) for w in result.waiting] == [("Fragmented", 30.0)]
    unlimited = [running("r0", "n0", 4), running("r1", "n1", 4)]
    result = plan([job("gang", 8)], [node("n0", 4), node("n1", 4)], running=unlimited, settings=settings)
    assert [(w.reason, w.estimated_start_s) for w in result.waiting] == [("Fragmented", None)]


def test_a_guaranteed_job_backfilled_into_a_reservation_stays_guaranteed() -> None:
    vcs = {"a": VirtualCluster("a", {"H100": 32})}  # room in the quota for both
    busy = [
        running("r0", "n0", 8, vc="a", max_runtime_s=100),
        running("r1", "n1", 4, vc="a", max_runtime_s=200),
    ]
    result = plan(
        [job("big", 8, instances=2, vc="a"), job("short", 4, vc="a", max_runtime_s=150)],
        [node("n0", 0), node("n1", 4)],
        running=busy,
        vcs=vcs,
    )
    assert [(d.job.job_id, d.borrowed) for d in result.decisions] == [("short", False)]
