"""Properties of every policy, over random clusters and job streams replayed in the simulator.

After every round: no GPU is held twice, every running job holds exactly its gang on the
fewest nodes (whole nodes for wide gangs), and the cluster's free count matches. At the
end: every job finished, having run exactly its duration, and only preemptive policies
preempted. Examples are few and small, so this runs in seconds.
"""

from __future__ import annotations

from collections.abc import Collection

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.sim.engine import simulate
from bench.sim.policy import POLICIES, Cluster, Job, make_policy
from bench.sim.policy.cluster import Placement
from bench.sim.traces import TraceJob


def _check_round(now: float, running: Collection[Job], cluster: Cluster) -> None:
    held: set[tuple[int, int]] = set()
    for job in running:
        assert job.running
        assert job.placement is not None
        _check_gang(job.gpus, job.placement, cluster.gpus_per_node)
        for piece in job.placement.slices:
            for gpu in piece.gpus:
                assert (piece.node, gpu) not in held, f"GPU {piece.node}/{gpu} given twice at t={now}"
                assert gpu not in cluster.free_gpus_on(piece.node), (
                    f"GPU {piece.node}/{gpu} both held and free"
                )
                held.add((piece.node, gpu))
    assert len(held) == cluster.total_gpus - cluster.free_total


def _check_gang(gpus: int, placement: Placement, per_node: int) -> None:
    """All or nothing, on the fewest nodes: one node, or whole nodes plus one remainder."""
    sizes = sorted((len(p.gpus) for p in placement.slices), reverse=True)
    assert sum(sizes) == gpus
    assert len({p.node for p in placement.slices}) == len(sizes)
    if gpus <= per_node:
        assert len(sizes) == 1
    else:
        whole, rest = divmod(gpus, per_node)
        assert sizes[:whole] == [per_node] * whole
        assert sizes[whole:] == ([rest] if rest else [])


@st.composite
def workloads(draw: st.DrawFn) -> tuple[int, int, list[TraceJob]]:
    nodes = draw(st.integers(1, 4))
    per_node = draw(st.sampled_from([1, 2, 4, 8]))
    count = draw(st.integers(1, 20))
    jobs = [
        TraceJob(
            f"j{i}",
            draw(st.integers(0, 200)),
            draw(st.integers(1, nodes * per_node)),
            draw(st.integers(0, 300)),
            "vc",
            i + 2,
        )
        for i in range(count)
    ]
    return nodes, per_node, jobs


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=40, deadline=None)
@given(workload=workloads())
def test_gangs_are_whole_no_gpu_is_given_twice_and_every_job_finishes(
    policy: str, workload: tuple[int, int, list[TraceJob]]
) -> None:
    nodes, per_node, trace = workload
    outcome = simulate(trace, policy, nodes, per_node, observer=_check_round)
    assert sorted(f.job_id for f in outcome.finished) == sorted(t.job_id for t in trace)
    by_id = {t.job_id: t for t in trace}
    for done in outcome.finished:
        assert done.executed_s == pytest.approx(by_id[done.job_id].duration_s)
        assert done.finish_s >= done.submit_s + done.duration_s - 1e-6
    if not make_policy(policy, oracle=lambda _job: 0.0).preemptive:
        assert all(f.preemptions == 0 for f in outcome.finished)


@settings(max_examples=200, deadline=None)
@given(
    per_node=st.integers(1, 8),
    nodes=st.integers(1, 5),
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=30),
    release=st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_placement_and_release_keep_the_books(
    per_node: int, nodes: int, sizes: list[int], release: list[bool]
) -> None:
    cluster = Cluster(nodes, per_node)
    held: list[Placement] = []
    for size, give_back in zip(sizes, release, strict=False):
        could = cluster.fits(size)
        placement = cluster.place(size)
        assert (placement is not None) == could
        if placement is not None:
            _check_gang(size, placement, per_node)
            held.append(placement)
        if give_back and held:
            cluster.release(held.pop(0))
        taken = [(p.node, g) for pl in held for p in pl.slices for g in p.gpus]
        assert len(taken) == len(set(taken))
        assert cluster.free_total == cluster.total_gpus - len(taken)


def test_best_fit_packs_small_jobs_and_keeps_whole_nodes_for_gangs() -> None:
    cluster = Cluster(3, 8)
    first = cluster.place(2)
    second = cluster.place(3)
    assert first is not None
    assert second is not None
    assert first.slices[0].node == second.slices[0].node  # packed onto the busy node
    wide = cluster.place(16)
    assert wide is not None
    assert sorted(len(p.gpus) for p in wide.slices) == [8, 8]
    assert cluster.place(8) is None  # 3 GPUs free on the busy node are not a node


def test_an_oracle_reaches_only_the_oracle_policies() -> None:
    with pytest.raises(ValueError, match="needs the true job durations"):
        make_policy("srtf")
    assert make_policy("corral").name == "corral"
    assert make_policy("las").name == "las"
