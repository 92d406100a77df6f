"""Moves (services/scheduler/moves.py): a job that the free GPUs could hold, but no single
node's, gets small jobs moved off the node closest to having room, when the other nodes'
free GPUs can take them; one cycle over a hand-made snapshot each, as in test_planner.py,
and the next cycle after the moved jobs stopped; the same over random fragmented clusters
(hypothesis); and a replay through the simulator."""

from __future__ import annotations

import copy

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from bench.sim.engine import Finished, simulate
from bench.sim.traces import TraceJob
from services.scheduler.model import NodeCapacity, PendingJob, PlanSettings, RunningJob
from services.scheduler.planner import plan
from tests.scheduler.test_planner import VCS, job, node, running

SETTINGS = PlanSettings(min_runtime_s=300)


def _small(job_id: str, node_id: str, gpu: int, **fields: object) -> RunningJob:
    """A 1-GPU borrowed job that ran 10 minutes (past the minimum runtime)."""
    return running(job_id, node_id, 1, first=gpu, **{"borrowed": True, "runtime_s": 600, **fields})


def _half_full(node_id: str, prefix: str, **fields: object) -> list[RunningJob]:
    return [_small(f"{prefix}{gpu}", node_id, gpu, **fields) for gpu in range(4)]


def test_small_jobs_move_off_one_node_and_the_job_gets_it_next_cycle() -> None:
    nodes = [node("n0", 4), node("n1", 4)]  # 8 free GPUs, 4 on each node
    smalls = _half_full("n0", "a") + _half_full("n1", "b")
    result = plan([job("gang", 8)], nodes, running=smalls, vcs=VCS, settings=SETTINGS)
    assert result.decisions == []
    assert sorted(p.job_id for p in result.preemptions) == ["a0", "a1", "a2", "a3"]
    assert all(p.reason.startswith("moved to another node") for p in result.preemptions)
    assert result.waiting[0].reason == "WaitingForPreemption"

    # Next cycle: the moved jobs stopped and wait again, ahead of the gang (less served);
    # best fit puts them in n1's holes, and the gang gets n0.
    moved = [job(f"a{gpu}", 1, attained_gpu_s=600.0) for gpu in range(4)]
    gang = job("gang", 8, attained_gpu_s=8 * 3600.0)
    nodes = [node("n0", 8), node("n1", 4)]
    again = plan([*moved, gang], nodes, running=smalls[4:], vcs=VCS, settings=SETTINGS)
    assert again.preemptions == []
    assert {d.job.job_id: d.placements[0].node_id for d in again.decisions} == {
        "a0": "n1",
        "a1": "n1",
        "a2": "n1",
        "a3": "n1",
        "gang": "n0",
    }


def test_the_node_needing_the_fewest_gpus_moved_is_cleared() -> None:
    nodes = [node("n0", 4), node("n1", 6), node("n2", 2)]
    smalls = [*_half_full("n0", "a"), _small("b0", "n1", 0), _small("b1", "n1", 1)]
    smalls += [running(f"c{i}", "n2", 2, first=2 * i, borrowed=True, runtime_s=600) for i in range(3)]
    result = plan([job("gang", 8)], nodes, running=smalls, vcs=VCS, settings=SETTINGS)
    assert sorted(p.job_id for p in result.preemptions) == ["b0", "b1"]


@pytest.mark.parametrize(
    "fields",
    [
        {"borrowed": False, "vc": "default"},  # guaranteed: never moved
        {"priority": 5},  # higher priority than the job
        {"runtime_s": 100},  # restarted less than the minimum runtime ago
        {"promoted": True},  # the starvation guard's: never stopped for service
    ],
    ids=["guaranteed", "higher-priority", "too-young", "promoted"],
)
def test_jobs_that_must_not_be_stopped_are_not_moved(fields: dict[str, object]) -> None:
    nodes = [node("n0", 4), node("n1", 4)]
    smalls = _half_full("n0", "a", **fields) + _half_full("n1", "b", **fields)
    result = plan([job("gang", 8)], nodes, running=smalls, vcs=VCS, settings=SETTINGS)
    assert result.preemptions == []
    assert result.waiting[0].reason == "Fragmented"


def test_nothing_moves_unless_the_other_nodes_can_take_every_moved_job() -> None:
    # 8 free GPUs, but clearing n0 means moving a 2-GPU job into holes of one GPU each.
    nodes = [node("n0", 6), node("n1", 1), node("n2", 1)]
    smalls = [running("pair", "n0", 2, borrowed=True, runtime_s=600)]
    smalls += [running(f"r{n}", f"n{n}", 7, borrowed=True, runtime_s=10) for n in (1, 2)]
    result = plan([job("gang", 8)], nodes, running=smalls, vcs=VCS, settings=SETTINGS)
    assert result.preemptions == []
    assert result.waiting[0].reason == "Fragmented"


def test_moves_can_be_turned_off() -> None:
    nodes = [node("n0", 4), node("n1", 4)]
    smalls = _half_full("n0", "a") + _half_full("n1", "b")
    off = PlanSettings(min_runtime_s=300, move_to_defragment=False, preempt_for_service=False)
    result = plan([job("gang", 8)], nodes, running=smalls, vcs=VCS, settings=off)
    assert result.preemptions == []
    assert result.waiting[0].reason == "Fragmented"


def test_a_job_that_no_node_can_hold_moves_nothing() -> None:
    nodes = [NodeCapacity(n, [4, 5, 6, 7], total_gpus=8, gpu_type="H100") for n in ("n0", "n1", "n2")]
    smalls = _half_full("n0", "a") + _half_full("n1", "b") + _half_full("n2", "c")
    result = plan([job("wide", 12)], nodes, running=smalls, vcs=VCS, settings=SETTINGS)
    assert not any(p.reason.startswith("moved") for p in result.preemptions)


def _replay_fragmented() -> tuple[dict[str, Finished], list[Finished]]:
    """Through the simulator's ``corral`` policy (the planner itself, as the
    ``CORRAL_SCHEDULER_*`` settings configure it): two 4-GPU nodes filled by eight 1-GPU
    jobs; one job on each node ends at 500 s, leaving a hole of one GPU on each, and a
    2-GPU job arrives at 800 s, when the others have run less than the first service
    threshold (900 GPU-s): least attained service sees no one to preempt for it until
    they cross it. Returns every job's outcome, and the preempted ones'."""
    trace = [TraceJob(f"s{i}", i, 1, 500 if i in (0, 4) else 50_000, "vc", i + 2) for i in range(8)]
    trace.append(TraceJob("pair", 800, 2, 3000, "vc", 10))
    outcome = simulate(trace, "corral", nodes=2, gpus_per_node=4)
    return {f.job_id: f for f in outcome.finished}, [f for f in outcome.finished if f.preemptions]


def test_replayed_a_move_starts_the_job_at_once_and_the_moved_jobs_lose_no_time() -> None:
    finished, preempted = _replay_fragmented()
    assert finished["pair"].queue_s == 0
    assert len(preempted) == 1
    assert preempted[0].queue_s == 0, "it restarted in the other node's hole in the same instant"


def test_replayed_without_moves_the_job_waits_until_it_may_preempt_for_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CORRAL_SCHEDULER_MOVE_TO_DEFRAGMENT", "false")  # as the live scheduler reads it
    finished, preempted = _replay_fragmented()
    assert finished["pair"].queue_s == pytest.approx(900 - 800 + 1, abs=1)  # s1 crosses 900 GPU-s at 901 s
    assert len(preempted) == 1


@st.composite
def fragmented(draw: st.DrawFn) -> tuple[list[NodeCapacity], list[RunningJob], PendingJob]:
    """Nodes of 4 or 8 GPUs filled with small borrowed jobs (of either priority, some too
    young to move, some promoted), some of which ended; and one job of up to a node's GPUs."""
    nodes, jobs = [], []
    for n in range(draw(st.integers(2, 5))):
        total, used = draw(st.sampled_from([4, 8])), 0
        free: list[int] = []
        while used < total:
            gpus = min(draw(st.sampled_from([1, 1, 2])), total - used)
            slot = tuple(range(used, used + gpus))
            used += gpus
            if draw(st.integers(0, 3)) == 0:
                free.extend(slot)  # this one ended
                continue
            fields = {
                "borrowed": True,
                "priority": draw(st.sampled_from([0, 0, 1])),
                "runtime_s": draw(st.sampled_from([50.0, 600.0, 600.0])),
                "promoted": draw(st.sampled_from([False, False, False, True])),
            }
            jobs.append(running(f"n{n}-{slot[0]}", f"n{n}", gpus, first=slot[0], **fields))
        nodes.append(NodeCapacity(f"n{n}", free, total_gpus=total, gpu_type="H100"))
    # Mostly a job that the free GPUs could hold but no one node's; sometimes one that fits.
    most, widest = max(len(n.free_gpus) for n in nodes), max(n.total_gpus for n in nodes)
    fragmented_size = st.integers(most + 1, widest) if most < widest else st.just(widest)
    gpus = draw(st.one_of(fragmented_size, fragmented_size, fragmented_size, st.integers(1, widest)))
    asking = job("asking", gpus, priority=draw(st.sampled_from([0, 1])))
    return nodes, jobs, asking


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(case=fragmented())
def test_a_move_only_takes_what_it_may_and_makes_room_where_the_moved_jobs_fit(
    case: tuple[list[NodeCapacity], list[RunningJob], PendingJob],
) -> None:
    nodes, jobs, asking = case
    free = {n.node_id: len(n.free_gpus) for n in nodes}
    result = plan([asking], copy.deepcopy(nodes), running=jobs, vcs=VCS, settings=SETTINGS)
    moves = [p for p in result.preemptions if p.reason.startswith("moved")]
    event("moved" if moves else "nothing to move")  # --hypothesis-show-statistics
    if not moves:
        # Then it was placed, or no node could be cleared by jobs it may move into the
        # other nodes' holes, or fewer GPUs are free than it needs.
        assert result.decisions or result.waiting[0].reason in (
            "Fragmented",
            "WaitingForPreemption",
            "InsufficientGPUs",
        )
        return
    by_id = {r.job_id: r for r in jobs}
    movers = [by_id[p.job_id] for p in moves]
    assert len({m.slices[0][0] for m in movers}) == 1, "movers come off one node"
    for mover in movers:
        assert mover.borrowed
        assert mover.priority <= asking.priority
        assert not mover.promoted
        assert mover.runtime_s >= SETTINGS.min_runtime_s
        assert mover.gpus < asking.gpus
    assert max(free.values()) < asking.gpus <= sum(free.values()), "only when fragmentation is why it waits"

    # Next cycle, the moved jobs stopped: the job and every moved job are placed.
    cleared = movers[0].slices[0][0]
    after = copy.deepcopy(nodes)
    for capacity in after:
        if capacity.node_id == cleared:
            capacity.free_gpus = sorted([*capacity.free_gpus, *(g for m in movers for g in m.slices[0][1])])
    back = [job(m.job_id, int(m.gpus), priority=m.priority, attained_gpu_s=m.attained_gpu_s) for m in movers]
    staying = [r for r in jobs if r not in movers]
    again = plan([*back, asking], after, running=staying, vcs=VCS, settings=SETTINGS)
    placed = {d.job.job_id: d.placements[0].node_id for d in again.decisions}
    assert placed.get("asking") == cleared
    assert set(placed) == {"asking", *(m.job_id for m in movers)}, again.waiting
