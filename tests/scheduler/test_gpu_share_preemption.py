"""Shares and preemption: a job holding shares can be reclaimed like any borrower, a
share job can reclaim without the what-if tripping over a shared GPU, and quotas and
limits counted in thousandths never fall to float dust."""

from __future__ import annotations

from services.scheduler.model import (
    NodeCapacity,
    PendingJob,
    RunningJob,
    TaskDemand,
    VirtualCluster,
    task_demand,
)
from services.scheduler.planner import plan


def _node(node_id: str, gpus: int, shares: dict[int, int], held: tuple[int, ...] = ()) -> NodeCapacity:
    free = [g for g in range(gpus) if g not in shares and g not in held]
    return NodeCapacity(node_id, free, total_gpus=gpus, gpu_type="H100", sharing=True, shares=dict(shares))


def test_borrowed_shares_are_reclaimed_for_a_guaranteed_job() -> None:
    vcs = {"a": VirtualCluster("a", {"H100": 2}), "b": VirtualCluster("b", {})}
    nodes = [_node("x", 2, {0: 999, 1: 999})]
    running = [
        RunningJob(f"b{g}", "b", "u", 0, "H100", (("x", (g,)),), borrowed=True, runtime_s=10, shares=(999,))
        for g in (0, 1)
    ]
    result = plan([PendingJob("a1", 1, 0, (TaskDemand("w", 1, 2),), vc="a")], nodes, running=running, vcs=vcs)
    assert sorted(p.job_id for p in result.preemptions) == ["b0", "b1"]
    assert result.waiting[0].reason == "WaitingForPreemption"
    assert nodes[0].shares == {0: 999, 1: 999}, "the what-if gave the shares back"


def test_a_share_job_reclaims_beside_a_shared_gpu_without_tripping() -> None:
    # GPU 0 holds half a GPU of shares; GPU 1 is B's borrowed whole GPU. A's two halves on one
    # node: one fits beside the shares, the other needs B's GPU back.
    vcs = {"a": VirtualCluster("a", {"H100": 2}), "b": VirtualCluster("b", {})}
    nodes = [_node("x", 2, {0: 500}, held=(1,))]
    running = [
        RunningJob("s", "a", "u", 0, "H100", (("x", (0,)),), runtime_s=10, shares=(500,)),
        RunningJob("b", "b", "u", 0, "H100", (("x", (1,)),), borrowed=True, runtime_s=10),
    ]
    wants = PendingJob("a1", 1, 0, (task_demand("w", 2, 0.5),), vc="a", topology="single_node")
    result = plan([wants], nodes, running=running, vcs=vcs)
    assert [p.job_id for p in result.preemptions] == ["b"]
    assert nodes[0].shares == {0: 1000}, "the share that fits now is held for the job"


def test_quota_and_user_limit_count_thousandths_exactly() -> None:
    vcs = {"a": VirtualCluster("a", {"H100": 1}, max_gpus_per_user=1)}
    nodes = [_node("x", 2, {0: 66})]
    running = [RunningJob(f"r{i}", "a", "u", 0, "H100", (("x", (0,)),), shares=(22,)) for i in range(3)]
    result = plan(
        [PendingJob("p", 1, 0, (task_demand("w", 1, 0.934),), vc="a", user="u")],
        nodes,
        running=running,
        vcs=vcs,
    )
    [decision] = result.decisions
    assert not decision.borrowed, "0.066 + 0.934 is the whole quota, not a hair over it"


def test_a_share_of_a_type_no_ready_node_has_does_not_blame_unhealthy_nodes() -> None:
    result = plan([PendingJob("p", 1, 0, (task_demand("w", 1, 0.5),), gpu_type="A100")], [_node("x", 2, {})])
    [waiting] = result.waiting
    assert waiting.reason == "GangDoesNotFit"
    assert "no ready node has GPUs of type A100" in waiting.detail


def test_a_waiting_share_gets_no_estimated_start() -> None:
    not_sharing = NodeCapacity("x", [0, 1], gpu_type="H100")
    result = plan([PendingJob("p", 1, 0, (task_demand("w", 1, 0.5),))], [not_sharing])
    [waiting] = result.waiting
    assert "no ready node pool shares its GPUs" in waiting.detail
    assert waiting.estimated_start_s is None  # two whole GPUs free say nothing of when it runs
