"""Properties of the live policy over random clusters, VCs, running and pending jobs.

One cycle each: no GPU is given twice (nor one a running job holds), gangs are whole,
guaranteed usage never exceeds a quota, preemption only hits borrowed or lower-priority
jobs, and every pending job is either placed or has exactly one reason.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.model import NodeCapacity, PendingJob, RunningJob, TaskDemand, VirtualCluster
from services.scheduler.node_index import NodeIndex
from services.scheduler.planner import PlanSettings, plan
from services.scheduler.tally import Tally
from services.scheduler.victims import VictimFinder

TYPES = ("H100", "A100")
VC_NAMES = ("a", "b", "c")


@dataclass
class Scenario:
    nodes: list[NodeCapacity]
    running: list[RunningJob]
    pending: list[PendingJob]
    vcs: dict[str, VirtualCluster]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    sizes = draw(
        st.lists(st.tuples(st.sampled_from([2, 4, 8]), st.sampled_from(TYPES)), min_size=1, max_size=5)
    )
    free = {f"n{i}": list(range(size)) for i, (size, _) in enumerate(sizes)}
    kind = {f"n{i}": gpu_type for i, (_, gpu_type) in enumerate(sizes)}
    vcs = {
        name: VirtualCluster(
            name,
            {t: draw(st.integers(0, 12)) for t in TYPES},
            draw(st.one_of(st.none(), st.integers(1, 16))),
        )
        for name in VC_NAMES
    }
    running: list[RunningJob] = []
    used: dict[tuple[str, str], int] = {}
    for n in range(draw(st.integers(0, 6))):
        node_id = draw(st.sampled_from(sorted(free)))
        if not free[node_id]:
            continue
        count = draw(st.integers(1, len(free[node_id])))
        gpus, free[node_id] = tuple(free[node_id][:count]), free[node_id][count:]
        vc = draw(st.sampled_from(VC_NAMES))
        # Guaranteed only while the VC's quota allows it, as the planner would have placed it.
        within = used.get((vc, kind[node_id]), 0) + count <= vcs[vc].quota[kind[node_id]]
        borrowed = draw(st.booleans()) or not within
        if not borrowed:
            used[(vc, kind[node_id])] = used.get((vc, kind[node_id]), 0) + count
        running.append(
            RunningJob(
                f"r{n}",
                vc=vc,
                user=draw(st.sampled_from("xy")),
                priority=draw(st.integers(-2, 2)),
                gpu_type=kind[node_id],
                slices=((node_id, gpus),),
                borrowed=borrowed,
                runtime_s=draw(st.sampled_from([1.0, 1000.0])),
                max_runtime_s=draw(st.sampled_from([None, 100.0, 5000.0])),
                preempting=draw(st.booleans()),
            )
        )
    pending = [
        PendingJob(
            f"p{n}",
            1,
            priority=draw(st.integers(-2, 2)),
            tasks=tuple(
                TaskDemand(
                    f"t{k}",
                    draw(st.integers(1, 3)),
                    draw(st.sampled_from([0, 1, 2, 4, 8])),
                    cpus=draw(st.sampled_from([0.0, 1.0, 2.5, 8.0])),
                    memory_mb=draw(st.sampled_from([0, 1024, 65536])),
                )
                for k in range(draw(st.integers(1, 2)))
            ),
            vc=draw(st.sampled_from(VC_NAMES)),
            user=draw(st.sampled_from("xy")),
            gpu_type=draw(st.sampled_from([None, *TYPES])),
            topology=draw(st.sampled_from(["pack", "pack", "single_node", "one_per_node"])),
            max_runtime_s=draw(st.sampled_from([None, 50.0, 500.0])),
        )
        for n in range(draw(st.integers(1, 10)))
    ]
    # Topology too: racks, and NVLink domains of 1, 2 or 4 GPUs (or one for the node).
    domain_size = {node_id: draw(st.sampled_from([0, 1, 2, 4])) for node_id in free}
    nodes = [
        NodeCapacity(
            node_id,
            list(gpus),
            total_gpus=sizes[i][0],
            gpu_type=kind[node_id],
            rack=draw(st.sampled_from(["", "r1", "r2"])),
            domains={g: g // domain_size[node_id] for g in range(sizes[i][0])}
            if domain_size[node_id]
            else {},
            # CPUs and memory left on the node (None: it reports none, no limit).
            free_cpus=draw(st.sampled_from([None, 0.0, 4.0, 16.0])),
            free_memory_mb=draw(st.sampled_from([None, 2048, 131072])),
        )
        for i, (node_id, gpus) in enumerate(free.items())
    ]
    return Scenario(nodes, running, pending, vcs)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(scenario=scenarios())
def test_the_policys_invariants_hold_for_any_snapshot(scenario: Scenario) -> None:
    kind = {n.node_id: n.gpu_type for n in scenario.nodes}
    free_before = {(n.node_id, g) for n in scenario.nodes for g in n.free_gpus}
    room_before = {n.node_id: (n.free_cpus, n.free_memory_mb) for n in scenario.nodes}
    cpus_placed: dict[str, float] = {}
    memory_placed: dict[str, int] = {}
    result = plan(
        scenario.pending,
        scenario.nodes,
        running=scenario.running,
        vcs=scenario.vcs,
        settings=PlanSettings(min_runtime_s=100),
    )
    taken: set[tuple[str, int]] = set()
    guaranteed: dict[tuple[str, str], float] = {}
    for r in scenario.running:
        if not r.borrowed:
            guaranteed[(r.vc, r.gpu_type)] = guaranteed.get((r.vc, r.gpu_type), 0) + r.gpus
    for decision in result.decisions:
        job = decision.job
        assert len(decision.placements) == sum(t.instances for t in job.tasks), "a gang is placed whole"
        types = set()
        for placement in decision.placements:
            [task] = [t for t in job.tasks if t.role == placement.role]
            assert len(placement.gpu_indices) == task.gpus
            cpus_placed[placement.node_id] = cpus_placed.get(placement.node_id, 0.0) + task.cpus
            memory_placed[placement.node_id] = memory_placed.get(placement.node_id, 0) + task.memory_mb
            for gpu in placement.gpu_indices:
                assert (placement.node_id, gpu) in free_before, "a GPU in use (or not ready) was given"
                assert (placement.node_id, gpu) not in taken, "a GPU was given twice"
                taken.add((placement.node_id, gpu))
                types.add(kind[placement.node_id])
        assert len(types) <= 1, "a job runs on one GPU type"
        if job.gpu_type and types:
            assert types == {job.gpu_type}
        nodes_used = [p.node_id for p in decision.placements]
        if job.topology == "single_node":
            assert len(set(nodes_used)) == 1
        if job.topology == "one_per_node":
            assert len(set(nodes_used)) == len(nodes_used)
        if types and not decision.borrowed:
            key = (job.vc, types.pop())
            guaranteed[key] = guaranteed.get(key, 0) + job.gpus
    for node_id, (cpus, memory_mb) in room_before.items():
        assert cpus is None or cpus_placed.get(node_id, 0.0) <= cpus + 1e-9, f"{node_id}: CPUs overcommitted"
        assert memory_mb is None or memory_placed.get(node_id, 0) <= memory_mb, (
            f"{node_id}: memory overcommitted"
        )
    for (vc, gpu_type), gpus in guaranteed.items():
        assert gpus <= scenario.vcs[vc].quota[gpu_type], f"VC {vc} holds {gpus} guaranteed {gpu_type}"
    by_id = {r.job_id: r for r in scenario.running}
    asking = {p.job_id: p for p in scenario.pending}
    for preemption in result.preemptions:
        victim, job = by_id[preemption.job_id], asking[preemption.for_job]
        assert not victim.preempting, "asked twice"
        assert victim.borrowed or (victim.priority < job.priority and victim.vc == job.vc), (
            f"{victim} preempted for {job}"
        )
        if not victim.borrowed:
            assert victim.runtime_s >= 100, "a guaranteed job ran its minimum before priority took it"
        assert preemption.for_job not in {d.job.job_id for d in result.decisions}
        if preemption.reason.startswith("moved"):  # moves.py: small borrowed jobs, never promoted ones
            assert victim.borrowed
            assert victim.priority <= job.priority
            assert not victim.promoted
            assert victim.gpus < job.gpus
            assert len(victim.slices) == 1
    placed = [d.job.job_id for d in result.decisions]
    waiting = [w.job_id for w in result.waiting]
    assert sorted(placed + waiting) == sorted(asking), "every pending job is placed or has one reason"
    assert [w.position for w in result.waiting] == list(range(1, len(waiting) + 1))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(scenario=scenarios())
def test_the_cycles_shortcuts_agree_with_their_plain_definitions(scenario: Scenario) -> None:
    """What the planner builds fast for thousands of jobs a cycle equals its plain form:
    victims cheapest first (with the stopping and borrowed jobs as the head that the
    reclaim and priority rules read alone, and a VC's own guaranteed jobs after them),
    and the tally of what running jobs hold."""
    finder = VictimFinder(NodeIndex(scenario.nodes), scenario.running, PlanSettings())
    for gpu_type in TYPES:
        mine = [r for r in scenario.running if r.gpu_type == gpu_type and r.gpus]
        cheapest = sorted(
            mine, key=lambda r: (not r.preempting, not r.borrowed, r.priority, r.runtime_s, r.job_id)
        )
        for vc in VC_NAMES:  # what a job of the VC could take: never another VC's guaranteed jobs
            mine_to_take = [r for r in cheapest if r.preempting or r.borrowed or r.vc == vc]
            assert finder.by_cost(gpu_type, vc) == mine_to_take
        head = finder.reclaimable(gpu_type)
        assert head == cheapest[: len(head)]
        assert all(r.preempting or r.borrowed for r in head)
        assert not any(r.preempting or r.borrowed for r in cheapest[len(head) :])
    one_by_one = Tally()
    for r in scenario.running:
        one_by_one.add(r.vc, r.user, r.gpu_type, r.gpus, r.borrowed)
    assert Tally.of(scenario.running) == one_by_one


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_racks_indexed_late_answer_as_if_indexed_from_the_start(data: st.DataObject) -> None:
    """The node index builds its buckets by rack only when a gang first asks for a rack,
    from the buckets by type as they are then: every answer is the one an index that kept
    them from the start gives, after any takes and gives before and after that moment."""
    shapes = data.draw(
        st.lists(st.tuples(st.sampled_from(TYPES), st.sampled_from(["r1", "r2"])), min_size=2, max_size=8)
    )
    nodes = [NodeCapacity(f"n{i}", list(range(8)), gpu_type=t, rack=r) for i, (t, r) in enumerate(shapes)]
    early, late = NodeIndex(copy.deepcopy(nodes)), NodeIndex(copy.deepcopy(nodes))
    for gpu_type in early.types():
        for rack in early.racks(gpu_type):
            early.free(gpu_type, rack)  # indexed by rack at once
    moves = data.draw(
        st.lists(st.tuples(st.sampled_from([n.node_id for n in nodes]), st.integers(1, 8)), max_size=40)
    )
    taken: dict[str, tuple[int, ...]] = {}
    for step, (node_id, count) in enumerate(moves):
        if step == len(moves) // 2:
            for gpu_type in late.types():
                for rack in late.racks(gpu_type):
                    late.free(gpu_type, rack)  # indexed by rack now, halfway through
        if taken.get(node_id):
            for index in (early, late):
                index.give(node_id, taken[node_id])
            taken[node_id] = ()
        elif count <= len(early.nodes[node_id].free_gpus):
            taken[node_id] = early.take(node_id, count)
            assert late.take(node_id, count) == taken[node_id]
    for gpu_type in TYPES:
        assert early.racks(gpu_type) == late.racks(gpu_type)
        for rack in early.racks(gpu_type):
            assert early.free(gpu_type, rack) == late.free(gpu_type, rack)
            assert early.most_free(gpu_type, rack) == late.most_free(gpu_type, rack)
            for want in range(1, 9):
                assert early.best_fit(gpu_type, want, rack=rack) == late.best_fit(gpu_type, want, rack=rack)
