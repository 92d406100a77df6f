"""Least attained service in the live policy: the duration-blind order and preemption that
the simulator measures (``bench.simulate --policy corral``), and its starvation guard.

One cycle over a hand-made snapshot each, as in test_planner.py.
"""

from __future__ import annotations

from services.scheduler.model import PlanSettings, RunningJob
from services.scheduler.planner import plan
from tests.scheduler.test_planner import VCS, job, node, running

HOUR = 3600.0
SETTINGS = PlanSettings(min_runtime_s=300, starve_after_s=48 * HOUR, reserve_after_s=48 * HOUR)


def test_a_new_job_preempts_one_that_has_been_served_much_more() -> None:
    served = running("long", "n0", 8, borrowed=True, runtime_s=4 * HOUR, attained_gpu_s=8 * 4 * HOUR)
    result = plan([job("new", 8)], [node("n0", 0)], running=[served], vcs=VCS, settings=SETTINGS)
    assert [p.job_id for p in result.preemptions] == ["long"]
    assert "less attained service" in result.preemptions[0].reason
    assert result.waiting[0].reason == "WaitingForPreemption"


def test_no_preemption_within_a_service_level_or_before_the_minimum_runtime() -> None:
    level_0 = running("short", "n0", 8, borrowed=True, runtime_s=600, attained_gpu_s=800)  # < 900 GPU-s
    same = plan([job("new", 8)], [node("n0", 0)], running=[level_0], vcs=VCS, settings=SETTINGS)
    assert same.preemptions == []
    young = running("young", "n0", 8, borrowed=True, runtime_s=100, attained_gpu_s=10 * HOUR)
    fresh = plan([job("new", 8)], [node("n0", 0)], running=[young], vcs=VCS, settings=SETTINGS)
    assert fresh.preemptions == []


def test_another_vcs_guaranteed_job_is_never_preempted_for_service() -> None:
    theirs = running("theirs", "n0", 8, vc="b", runtime_s=10 * HOUR, attained_gpu_s=80 * HOUR)
    result = plan([job("mine", 8, vc="a")], [node("n0", 0)], running=[theirs], vcs=VCS, settings=SETTINGS)
    # "mine" is within a's quota: it reclaims borrowed GPUs only; b's guaranteed job stays.
    assert result.preemptions == []


def test_less_attained_service_goes_first_within_a_priority() -> None:
    served = job("served", 8, attained_gpu_s=20 * HOUR)  # preempted earlier: back in the queue
    fresh = job("fresh", 8)
    result = plan([served, fresh], [node("n0", 8)], vcs=VCS, settings=SETTINGS)
    assert [d.job.job_id for d in result.decisions] == ["fresh"]
    assert [w.job_id for w in result.waiting] == ["served"]


def test_a_starving_job_ranks_first_preempts_and_is_then_never_preempted_for_service() -> None:
    nodes = [node(f"n{i}", 0) for i in range(4)]  # 32 GPUs: an 8-GPU job may be promoted
    busy = [
        running(f"r{i}", f"n{i}", 8, borrowed=True, runtime_s=HOUR, attained_gpu_s=400.0) for i in range(4)
    ]
    starving = job("starving", 8, attained_gpu_s=99 * HOUR, waited_s=49 * HOUR)
    result = plan([starving], nodes, running=busy, vcs=VCS, settings=SETTINGS)
    assert len(result.preemptions) == 1  # one 8-GPU job, though every one is at level 0
    free = [node("n0", 8), *nodes[1:]]  # had n0 been free, its allocation would say "promoted"
    placed = plan([starving], free, running=busy[1:], vcs=VCS, settings=SETTINGS).decisions
    assert [(d.job.job_id, d.promoted) for d in placed] == [("starving", True)]
    # Running now, with far more service than anyone: still not a victim, it was promoted
    # (its allocation says so), even once a higher limit no longer counts its wait as long.
    promoted = running(
        "starving", "n0", 8, borrowed=True, runtime_s=HOUR, attained_gpu_s=100 * HOUR, promoted=True
    )
    later = plan([job("new", 8)], nodes, running=[promoted, *busy[1:]], vcs=VCS, settings=SETTINGS)
    assert [p.job_id for p in later.preemptions] == []
    # A job that merely waited as long before it started, unpromoted, is served like any.
    waited = running("waited", "n0", 8, borrowed=True, runtime_s=HOUR, attained_gpu_s=100 * HOUR)
    waited.waited_s = 49 * HOUR
    other = plan([job("new", 8)], nodes, running=[waited, *busy[1:]], vcs=VCS, settings=SETTINGS)
    assert [p.job_id for p in other.preemptions] == ["waited"]


def test_promoted_jobs_hold_at_most_half_the_cluster_longest_wait_first() -> None:
    # 32 GPUs: a budget of 16. One promoted 8-GPU job runs; of two starving 8-GPU jobs
    # only the one that waited longer is promoted (and preempts), though it came later.
    nodes = [node(f"n{i}", 0) for i in range(4)]
    old = running("old", "n0", 8, borrowed=True, runtime_s=HOUR, attained_gpu_s=99 * HOUR, promoted=True)
    busy = [
        running(f"r{i}", f"n{i}", 8, borrowed=True, runtime_s=HOUR, attained_gpu_s=400.0) for i in range(1, 4)
    ]
    first = job("first", 8, attained_gpu_s=99 * HOUR, waited_s=50 * HOUR)
    longer = job("longer", 8, attained_gpu_s=99 * HOUR, waited_s=60 * HOUR)
    result = plan([first, longer], nodes, running=[old, *busy], vcs=VCS, settings=SETTINGS)
    assert [p.for_job for p in result.preemptions] == ["longer"]
    assert [w.job_id for w in result.waiting] == ["longer", "first"]


def test_a_wide_job_is_never_promoted() -> None:
    # 16 GPUs of a 32-GPU cluster is more than a quarter of it.
    wide = job("wide", 8, instances=2, waited_s=49 * HOUR, attained_gpu_s=99 * HOUR)
    busy = [running(f"r{i}", f"n{i}", 8, borrowed=True, runtime_s=HOUR, attained_gpu_s=800) for i in range(4)]
    result = plan([wide], [node(f"n{i}", 0) for i in range(4)], running=busy, vcs=VCS, settings=SETTINGS)
    assert result.preemptions == []


def test_before_its_reservation_time_a_job_that_does_not_fit_lets_smaller_ones_go_ahead() -> None:
    # n0 has 4 GPUs free and 4 held by r0: the big job's reservation would be n0, its free
    # GPUs withheld from the small job once the big one has waited past the limit.
    busy = running("r0", "n0", 4, borrowed=True, runtime_s=100)
    early = plan(
        [job("big", 8, waited_s=HOUR), job("small", 4)],
        [node("n0", 4)],
        running=[busy],
        vcs=VCS,
        settings=SETTINGS,
    )
    assert [d.job.job_id for d in early.decisions] == ["small"]  # Tiresias skips, no reservation yet
    late = plan(
        [job("big", 8, waited_s=50 * HOUR), job("small", 4)],
        [node("n0", 4)],
        running=[busy],
        vcs=VCS,
        settings=SETTINGS,
    )
    assert late.decisions == []  # it waited past the limit: it holds a reservation (EASY)
    assert [w.reason for w in late.waiting][1] == "Priority"


def test_within_a_service_level_a_gang_too_wide_to_be_promoted_is_preempted_last() -> None:
    # 16 nodes: a 64-GPU gang (wider than a quarter: the guard would never get it back)
    # and an 8-GPU job, both at the top level; the gang has been served more, but the new
    # job preempts the 8-GPU one.
    nodes = [node(f"n{i}", 0) for i in range(16)]
    gang = RunningJob(
        "gang",
        "default",
        "u",
        0,
        "H100",
        tuple((f"n{i}", tuple(range(8))) for i in range(8)),
        borrowed=True,
        runtime_s=10 * HOUR,
        attained_gpu_s=64 * 10 * HOUR,
    )
    small = running("small", "n8", 8, borrowed=True, runtime_s=40 * HOUR, attained_gpu_s=8 * 40 * HOUR)
    fresh = [running(f"r{i}", f"n{i}", 8, borrowed=True, runtime_s=60) for i in range(9, 16)]
    result = plan([job("new", 8)], nodes, running=[gang, small, *fresh], vcs=VCS, settings=SETTINGS)
    assert [p.job_id for p in result.preemptions] == ["small"]
