"""The foundation's placement policy: whole gangs or nothing, never a GPU twice."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.model import NodeCapacity, PendingJob, TaskDemand
from services.scheduler.node_index import NodeIndex, nvlink_choice
from services.scheduler.placement import place_gang, type_order
from services.scheduler.planner import decide, plan


def _nodes(*free: int) -> dict[str, NodeCapacity]:
    return {f"n{i}": NodeCapacity(f"n{i}", list(range(count))) for i, count in enumerate(free)}


def _job(job_id: str, *tasks: tuple[int, int], priority: int = 0) -> PendingJob:
    demands = tuple(TaskDemand(f"r{i}", instances, gpus) for i, (instances, gpus) in enumerate(tasks))
    return PendingJob(job_id, 1, priority, demands)


def test_a_gang_that_does_not_fit_takes_nothing() -> None:
    nodes = _nodes(8, 4)
    assert place_gang(_job("j", (4, 4)), NodeIndex(nodes.values()), "") is None  # 16 GPUs wanted, 12 exist
    assert [n.free_gpus for n in nodes.values()] == [list(range(8)), list(range(4))]


def test_best_fit_keeps_the_big_node_free() -> None:
    nodes = _nodes(8, 2)
    [placement] = place_gang(_job("j", (1, 2)), NodeIndex(nodes.values()), "") or []
    assert placement.node_id == "n1"
    assert nodes["n0"].free_gpus == list(range(8))


def test_a_job_that_does_not_fit_does_not_block_smaller_ones() -> None:
    nodes = _nodes(4)
    decisions = decide([_job("big", (1, 8)), _job("small", (1, 1))], nodes)
    assert [d.job.job_id for d in decisions] == ["small"]


def test_higher_priority_goes_first() -> None:
    nodes = _nodes(4)
    decisions = decide([_job("low", (1, 4)), _job("high", (1, 4), priority=5)], nodes)
    assert [d.job.job_id for d in decisions] == ["high"]


def test_every_job_left_waiting_says_why_in_queue_order() -> None:
    half_busy = {n: NodeCapacity(n, [0, 1], total_gpus=4) for n in ("n0", "n1")}  # 2 of 4 free on each
    result = plan(
        [
            _job("wide", (1, 8)),  # no ready node has 8 GPUs; a drained one does
            _job("fits", (1, 2), priority=1),  # placed first, on n0
            _job("frag", (1, 2)),  # 2 wanted, 2 free, but ... placed on n1
            _job("big", (2, 2)),  # 4 wanted, none left
            _job("whole", (1, 4)),  # 4 on one node: none has 4 free, 0 free now anyway
        ],
        half_busy,
        largest_unready_node=8,
    )
    assert [d.job.job_id for d in result.decisions] == ["fits", "frag"]
    assert [(w.job_id, w.reason, w.position) for w in result.waiting] == [
        ("wide", "NodesUnhealthy", 1),
        ("big", "Priority", 2),  # 4 GPUs were free when the cycle began; jobs ahead took them
        ("whole", "Priority", 3),
    ]
    assert result.waiting[0].detail == (
        "a task needs 8 GPUs on one node; only nodes that are drained or unreachable have that many"
        " (the largest ready node has 4)"
    )


def test_only_the_first_of_a_queue_waits_for_gpus_the_rest_for_the_jobs_ahead() -> None:
    """Slurm's Resources and Priority: jobs behind one that waits for the same GPUs, asking
    as many, wait for it (Priority); a smaller job behind a bigger one would start as soon
    as its own GPUs came free, so it waits for GPUs. Stable from cycle to cycle."""
    full = [NodeCapacity("n0", [], total_gpus=8)]
    result = plan(
        [_job("big", (1, 4)), _job("small", (1, 2)), _job("same", (1, 2)), _job("more", (1, 4))], full
    )
    assert [(w.job_id, w.reason) for w in result.waiting] == [
        ("big", "InsufficientGPUs"),
        ("small", "InsufficientGPUs"),  # "big" asks more: a freed pair of GPUs would go to "small"
        ("same", "Priority"),
        ("more", "Priority"),
    ]
    assert (
        result.waiting[2].detail == "needs 2 GPUs; jobs ahead of it in the queue get them first (0 free now)"
    )


@pytest.mark.parametrize(
    ("job", "nodes", "reason", "detail"),
    [
        (_job("j", (1, 8)), [NodeCapacity("n0", [0, 1, 2, 3])], "GangDoesNotFit",
         "a task needs 8 GPUs on one node; the largest ready node has 4"),
        (_job("j", (1, 4)), [NodeCapacity("n0", [0, 1], total_gpus=8)], "InsufficientGPUs",
         "needs 4 GPUs; 2 are free on ready nodes"),
        (_job("j", (1, 4)), [NodeCapacity(n, [0, 1], total_gpus=4) for n in ("n0", "n1")], "Fragmented",
         "needs 4 GPUs as 1x4 and 4 are free, but spread so that the gang does not fit"
         " (a task needs 4 on one node)"),
    ],
)  # fmt: skip
def test_the_reason_names_what_to_wait_for(
    job: PendingJob, nodes: list[NodeCapacity], reason: str, detail: str
) -> None:
    (waiting,) = plan([job], {n.node_id: n for n in nodes}).waiting
    assert (waiting.reason, waiting.detail) == (reason, detail)


jobs_strategy = st.lists(
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 8)), min_size=1, max_size=3),
    min_size=1,
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(free=st.lists(st.integers(0, 8), min_size=1, max_size=6), jobs=jobs_strategy)
def test_no_gpu_is_given_twice_and_gangs_are_whole(
    free: list[int], jobs: list[list[tuple[int, int]]]
) -> None:
    nodes = _nodes(*free)
    pending = [_job(f"j{i}", *tasks) for i, tasks in enumerate(jobs)]
    decisions = decide(pending, nodes)
    taken: set[tuple[str, int]] = set()
    for decision in decisions:
        wanted = sum(t.instances for t in decision.job.tasks)
        assert len(decision.placements) == wanted, "a gang is placed whole"
        for task in decision.job.tasks:
            for placement in (p for p in decision.placements if p.role == task.role):
                assert len(placement.gpu_indices) == task.gpus
        for placement in decision.placements:
            for gpu in placement.gpu_indices:
                assert (placement.node_id, gpu) not in taken, "a GPU was given twice"
                assert gpu < free[int(placement.node_id[1:])]
                taken.add((placement.node_id, gpu))
    # What is left free is exactly what was not taken.
    left = {(n, g) for n, node in nodes.items() for g in node.free_gpus}
    everything = {(f"n{i}", g) for i, count in enumerate(free) for g in range(count)}
    assert left == everything - taken


# --- topology: racks and NVLink domains ------------------------------------------------


def _racked(*nodes: tuple[str, str, int]) -> list[NodeCapacity]:
    """(node, rack, free GPUs) of 8-GPU nodes."""
    return [NodeCapacity(n, list(range(8 - free, 8)), total_gpus=8, rack=rack) for n, rack, free in nodes]


def test_a_multi_node_gang_stays_in_one_rack_the_fullest_that_holds_it() -> None:
    nodes = _racked(
        ("a1", "ra", 8), ("b1", "rb", 8), ("b2", "rb", 8), ("b3", "rb", 4), ("c1", "rc", 8), ("c2", "rc", 8)
    )
    placements = place_gang(_job("j", (2, 8)), NodeIndex(nodes), "") or []
    # rb (20 free) and rc (16 free) can hold 16 GPUs; rc is the tighter fit. Without racks
    # best fit would have taken a1 (first in id order) and another rack's node.
    assert sorted(p.node_id for p in placements) == ["c1", "c2"]


def test_a_gang_no_rack_can_hold_spreads_across_racks() -> None:
    nodes = _racked(("a1", "ra", 8), ("b1", "rb", 8), ("c1", "rc", 4))
    placements = place_gang(_job("j", (2, 8)), NodeIndex(nodes), "") or []
    assert sorted(p.node_id for p in placements) == ["a1", "b1"]


def test_a_task_takes_its_gpus_from_one_nvlink_domain() -> None:
    # Two domains of four GPUs; domain 0 has 0 and 1 taken, domain 1 is whole.
    node = NodeCapacity("n0", [2, 3, 4, 5, 6, 7], total_gpus=8, domains={g: g // 4 for g in range(8)})
    index = NodeIndex([node])
    [pair] = place_gang(_job("pair", (1, 2)), index, "") or []
    assert pair.gpu_indices == (2, 3)  # the fuller domain still holds two: domain 1 stays whole
    [quad] = place_gang(_job("quad", (1, 4)), index, "") or []
    assert quad.gpu_indices == (4, 5, 6, 7)
    assert node.free_gpus == []


@pytest.mark.parametrize(
    ("free", "count", "chosen"),
    [
        ([0, 1, 2, 3, 4, 5, 6, 7], 1, (0,)),
        ([1, 2, 3, 4, 5, 6, 7], 1, (1,)),  # the partly used domain 0, not whole domain 1
        ([1, 2, 3, 4, 5, 6, 7], 4, (4, 5, 6, 7)),
        ([1, 2, 3, 5, 6, 7], 4, (1, 2, 3, 5)),  # no domain has 4: as few domains as possible
        ([0, 4, 5], 2, (4, 5)),
    ],
)
def test_nvlink_choice(free: list[int], count: int, chosen: tuple[int, ...]) -> None:
    assert nvlink_choice(free, {g: g // 4 for g in range(8)}, count) == chosen


# --- CPUs and memory -------------------------------------------------------------------


def _cpu_job(job_id: str, instances: int, gpus: int, cpus: float, memory_mb: int = 0) -> PendingJob:
    return PendingJob(job_id, 1, 0, (TaskDemand("w", instances, gpus, cpus, memory_mb),))


def test_an_instance_goes_only_where_its_cpus_and_memory_are_free() -> None:
    nodes = [
        NodeCapacity("n0", list(range(8)), free_cpus=4.0, free_memory_mb=65536),  # GPUs, few CPUs
        NodeCapacity("n1", list(range(8)), free_cpus=64.0, free_memory_mb=1024),  # little memory
        NodeCapacity("n2", list(range(8)), free_cpus=64.0, free_memory_mb=65536),
    ]
    index = NodeIndex(nodes)
    [placement] = place_gang(_cpu_job("j", 1, 2, cpus=16, memory_mb=4096), index, "") or []
    assert placement.node_id == "n2"
    assert (nodes[2].free_cpus, nodes[2].free_memory_mb) == (48.0, 61440)
    # Two instances that fit one node's GPUs but not its CPUs together: two nodes.
    small = [NodeCapacity(n, list(range(8)), free_cpus=4.0) for n in ("s0", "s1")]
    placements = place_gang(_cpu_job("k", 2, 1, cpus=3), NodeIndex(small), "") or []
    assert sorted(p.node_id for p in placements) == ["s0", "s1"]


def test_a_gang_that_fails_on_cpus_gives_back_everything() -> None:
    nodes = [NodeCapacity(n, list(range(8)), free_cpus=10.0) for n in ("n0", "n1")]
    assert place_gang(_cpu_job("j", 3, 8, cpus=8), NodeIndex(nodes), "") is None  # 3 x 8 GPUs: only 2 nodes
    assert place_gang(_cpu_job("k", 2, 2, cpus=6), NodeIndex(nodes), "") is not None
    assert place_gang(_cpu_job("l", 2, 1, cpus=6), NodeIndex(nodes), "") is None  # 4 + 4 CPUs left
    assert [(n.free_cpus, len(n.free_gpus)) for n in nodes] == [(4.0, 6), (4.0, 6)]


def test_nodes_without_a_cpu_figure_take_any_cpus() -> None:
    [placement] = place_gang(_cpu_job("j", 1, 1, cpus=500), NodeIndex([NodeCapacity("n0", [0])]), "") or []
    assert placement.node_id == "n0"


def test_a_gpu_less_instance_takes_cpus_beside_busy_gpus_not_idle_ones() -> None:
    """Spread over the least loaded nodes, GPU-less instances use up the CPUs that idle
    GPUs need; they go where the least GPU capacity is idle, the most CPUs free first."""
    busy = NodeCapacity("busy", [], total_gpus=4, free_cpus=16.0)
    half = NodeCapacity("half", [0, 1], total_gpus=4, free_cpus=64.0)
    idle = NodeCapacity("idle", [0, 1, 2, 3], free_cpus=96.0)
    index = NodeIndex([busy, half, idle])
    placed = [place_gang(_cpu_job(f"c{n}", 1, 0, cpus=8), index, "") or [] for n in range(3)]
    assert [p.node_id for [p] in placed] == ["busy", "busy", "half"]  # busy's 16 CPUs, then half's
    assert (busy.free_cpus, half.free_cpus, idle.free_cpus) == (0.0, 56.0, 96.0)
    # Among nodes with as much idle, the one with the most CPUs free.
    roomy = NodeCapacity("roomy", [], total_gpus=4, free_cpus=32.0)
    [placement] = place_gang(_cpu_job("d", 1, 0, cpus=8), NodeIndex([busy, roomy]), "") or []
    assert placement.node_id == "roomy"
    # A node without GPUs before a GPU node as idle: its CPUs serve no GPU.
    cpu_only = NodeCapacity("cpu-only", [], total_gpus=0, free_cpus=8.0)
    [placement] = place_gang(_cpu_job("e", 1, 0, cpus=8), NodeIndex([roomy, cpu_only]), "") or []
    assert placement.node_id == "cpu-only"


def test_a_job_naming_no_type_goes_to_the_type_where_it_fits_best() -> None:
    """Not to the type with the most free GPUs: a one-GPU job fills the T4 node's last GPU
    and leaves the A100 nodes whole."""
    nodes = [NodeCapacity(f"a{i}", list(range(8)), gpu_type="A100") for i in range(2)]
    nodes.append(NodeCapacity("t0", [1], total_gpus=2, gpu_type="T4"))
    result = plan([_job("one", (1, 1)), _job("eight", (1, 8))], nodes)
    assert {d.job.job_id: d.placements[0].node_id for d in result.decisions} == {"one": "t0", "eight": "a0"}
    # A job that fits no node of the better type whole is tried where it fits.
    index = NodeIndex([NodeCapacity("t1", [0, 1], gpu_type="T4"), *_nodes(8).values()])
    assert type_order(_job("four", (1, 4)), index, index.types()) == ["", "T4"]
