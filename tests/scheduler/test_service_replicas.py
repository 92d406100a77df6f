"""Service replicas (``kind: service`` jobs) in the live policy: they run within their
VC's quota and never borrow, no batch job preempts one by any rule, and a replica preempts
another replica only for priority within its VC. Batch jobs fare as before.

One cycle over a hand-made snapshot each, as in test_planner.py.
"""

from __future__ import annotations

from services.scheduler.model import PlanSettings
from services.scheduler.planner import plan
from tests.scheduler.test_planner import VCS, job, node, running

HOUR = 3600.0
SETTINGS = PlanSettings(min_runtime_s=60, starve_after_s=48 * HOUR, reserve_after_s=48 * HOUR)


def test_a_replica_beyond_its_vcs_quota_waits_where_a_batch_job_would_borrow() -> None:
    nodes = [node("n0", 8), node("n1", 8)]
    replicas = plan(
        [job("in", 8, vc="a", service=True), job("over", 4, vc="a", service=True)], nodes, vcs=VCS
    )
    assert [(d.job.job_id, d.borrowed) for d in replicas.decisions] == [("in", False)]
    [waiting] = replicas.waiting
    assert waiting.job_id == "over"
    assert waiting.reason == "WaitingForQuota"
    assert "never borrows" in waiting.detail
    batch = plan([job("in", 8, vc="a"), job("over", 4, vc="a")], [node("n0", 8), node("n1", 8)], vcs=VCS)
    assert {(d.job.job_id, d.borrowed) for d in batch.decisions} == {("in", False), ("over", True)}


def test_a_replica_in_a_vc_without_quota_says_why_it_waits() -> None:
    result = plan([job("svc", 1, service=True)], [node("n0", 8)], vcs=VCS)
    assert result.decisions == []
    assert result.waiting[0].reason == "WaitingForQuota"
    assert "virtual cluster default uses 0 of its 0 guaranteed H100" in result.waiting[0].detail


def test_a_replica_without_gpus_runs_anywhere() -> None:
    result = plan([job("cpu-svc", 0, service=True)], [node("n0", 8)], vcs=VCS)
    assert [d.job.job_id for d in result.decisions] == ["cpu-svc"]


def test_a_higher_priority_batch_job_of_the_vc_does_not_preempt_a_replica() -> None:
    replica = running("svc", "n0", 8, vc="a", priority=0, runtime_s=10 * HOUR, service=True)
    result = plan(
        [job("urgent", 8, vc="a", priority=100)],
        [node("n0", 0)],
        running=[replica],
        vcs=VCS,
        settings=SETTINGS,
    )
    assert result.preemptions == []
    # The same job as a batch job is preempted: the rule is in force, the replica is exempt.
    batch = running("batch", "n0", 8, vc="a", priority=0, runtime_s=10 * HOUR)
    taken = plan(
        [job("urgent", 8, vc="a", priority=100)], [node("n0", 0)], running=[batch], vcs=VCS, settings=SETTINGS
    )
    assert [p.job_id for p in taken.preemptions] == ["batch"]


def test_no_replica_is_preempted_for_attained_service() -> None:
    replica = running("svc", "n0", 8, vc="a", runtime_s=10 * HOUR, attained_gpu_s=80 * HOUR, service=True)
    result = plan([job("fresh", 8, vc="a")], [node("n0", 0)], running=[replica], vcs=VCS, settings=SETTINGS)
    assert result.preemptions == []


def test_a_starving_batch_job_does_not_preempt_a_replica() -> None:
    replica = running("svc", "n0", 8, runtime_s=HOUR, attained_gpu_s=400.0, service=True, borrowed=True)
    starving = job("starving", 8, attained_gpu_s=99 * HOUR, waited_s=49 * HOUR)
    result = plan([starving], [node("n0", 0)], running=[replica], vcs=VCS, settings=SETTINGS)
    assert result.preemptions == []


def test_a_replica_preempts_a_lower_priority_replica_of_its_vc_only() -> None:
    low = running("low", "n0", 8, vc="a", priority=0, runtime_s=HOUR, service=True)
    higher = plan(
        [job("high", 8, vc="a", priority=5, service=True)],
        [node("n0", 0)],
        running=[low],
        vcs=VCS,
        settings=SETTINGS,
    )
    assert [p.job_id for p in higher.preemptions] == ["low"]
    same = plan(
        [job("peer", 8, vc="a", priority=0, service=True)],
        [node("n0", 0)],
        running=[low],
        vcs=VCS,
        settings=SETTINGS,
    )
    assert same.preemptions == []
    theirs = running("theirs", "n0", 8, vc="b", priority=0, runtime_s=HOUR, service=True)
    other_vc = plan(
        [job("high", 8, vc="a", priority=5, service=True)],
        [node("n0", 0)],
        running=[theirs],
        vcs=VCS,
        settings=SETTINGS,
    )
    assert other_vc.preemptions == []


def test_a_replica_already_being_stopped_frees_its_gpus_for_anyone() -> None:
    stopping = running("svc", "n0", 8, vc="a", priority=0, runtime_s=HOUR, service=True, preempting=True)
    result = plan([job("a1", 8, vc="a", priority=5)], [node("n0", 0)], running=[stopping], vcs=VCS)
    assert result.waiting[0].reason == "WaitingForPreemption"
