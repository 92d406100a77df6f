"""Placement weighs what it strands: free GPU capacity a node keeps but that the asks of the
workload mix could no longer use (a GPU left without the CPUs jobs ask beside it, a node's
last whole GPU turned into a share's leftover). Best fit otherwise, and with no mix."""

from __future__ import annotations

import copy

import pytest

from services.scheduler.model import NodeCapacity, PendingJob, RunningJob, TaskDemand
from services.scheduler.node_index import NodeIndex
from services.scheduler.planner import plan
from services.scheduler.stranding import WorkloadMix


def _job(job_id: str, gpus: int = 1, cpus: float = 0.0, milli: int = 0) -> PendingJob:
    return PendingJob(job_id, 1, 0, (TaskDemand("w", 1, gpus, cpus, gpu_milli=milli),))


def test_the_mix_is_the_commonest_one_gpu_asks_weighted_by_instances() -> None:
    jobs = [
        *(_job(f"w{n}", cpus=8) for n in range(12)),
        *(_job(f"s{n}", gpus=0, cpus=4, milli=500) for n in range(7)),
        _job("rare", cpus=64),
        _job("wide", gpus=8, cpus=64),  # several GPUs: not an ask fragments are made of
        _job("cpu-only", gpus=0, cpus=2),
        PendingJob("gang", 1, 0, (TaskDemand("w", 4, 1, 2.0),)),  # four instances of one GPU
    ]
    mix = WorkloadMix.of(jobs)
    # 24 one-GPU instances; the commonest cover 95 % of them with 23, so the rare one is cut.
    assert mix.shapes == (
        (None, 8.0, 0, 1000, 12 / 23),
        (None, 4.0, 0, 500, 7 / 23),
        (None, 2.0, 0, 1000, 4 / 23),
    )
    assert not WorkloadMix.of([_job("cpu-only", gpus=0, cpus=2)])  # no one-GPU ask: no mix


def test_running_jobs_count_by_slice_as_asked() -> None:
    """A running job's one-GPU slices and shares count, with what each task asked and the
    GPU type its job asked for, as a pending job's ask does (None: any type)."""
    running = [
        RunningJob(
            "r1",
            "default",
            "u",
            0,
            "T4",
            (("n0", (0,)), ("n1", (1,))),
            slice_asks=((8.0, 100), (8.0, 100)),
            asked_type="T4",
        ),
        RunningJob("r2", "default", "u", 0, "A100", (("n2", (3,)),), shares=(500,), slice_asks=((4.0, 0),)),
        RunningJob("wide", "default", "u", 0, "A100", (("n2", (0, 1)),), slice_asks=((16.0, 0),)),
        RunningJob("unknown", "default", "u", 0, "A100", (("n3", (0,)),)),  # asks not read: not counted
    ]
    pending = [PendingJob("p", 1, 0, (TaskDemand("w", 1, 1, 8.0, 100),), gpu_type="T4")]
    assert WorkloadMix.of(pending, running).shapes == (
        ("T4", 8.0, 100, 1000, 3 / 4),
        (None, 4.0, 0, 500, 1 / 4),
    )  # fmt: skip


def test_a_shape_counts_only_where_it_could_run() -> None:
    """Asks for another GPU type, or shares on a node that does not share, do not steer a
    placement: 16 CPUs on a would leave its other GPU with 4, but only A100 jobs and shares
    ask for 8, and a is a T4 node that does not share."""
    nodes = [
        NodeCapacity("a", [0, 1], gpu_type="T4", free_cpus=20.0),
        NodeCapacity("b", [0, 1, 2], gpu_type="T4", free_cpus=64.0),
    ]
    elsewhere = WorkloadMix({("A100", 8.0, 0, 1000): 5, (None, 8.0, 0, 500): 5})
    assert NodeIndex(copy.deepcopy(nodes), elsewhere).best_fit("T4", 1, cpus=16) == "a"
    here = WorkloadMix({("T4", 8.0, 0, 1000): 5})
    assert NodeIndex(copy.deepcopy(nodes), here).best_fit("T4", 1, cpus=16) == "b"


def test_a_whole_gpu_job_leaves_no_free_gpu_without_the_cpus_jobs_ask_beside_it() -> None:
    tight = NodeCapacity("a", [0, 1], gpu_type="T4", free_cpus=20.0)  # the best fit for one GPU
    roomy = NodeCapacity("b", [0, 1, 2], gpu_type="T4", free_cpus=64.0)
    mix = WorkloadMix({(None, 8.0, 0, 1000): 10})
    # On a, 16 CPUs would leave one GPU with 4 CPUs: no ask of the mix could use it.
    assert NodeIndex(copy.deepcopy([tight, roomy]), mix).best_fit("T4", 1, cpus=16) == "b"
    assert NodeIndex(copy.deepcopy([tight, roomy]), mix).best_fit("T4", 1, cpus=8) == "a"  # 12 left: enough
    assert NodeIndex(copy.deepcopy([tight, roomy])).best_fit("T4", 1, cpus=16) == "a"  # no mix: best fit
    # Where every node would strand some, the one that strands least.
    small = NodeCapacity("c", [0, 1, 2], gpu_type="T4", free_cpus=22.0)  # 2 GPUs, 6 CPUs left
    assert NodeIndex(copy.deepcopy([tight, small]), mix).best_fit("T4", 1, cpus=16) == "a"


def test_the_planner_weighs_stranding_against_its_queue() -> None:
    """A 16-CPU job on a (best fit) would leave a's other GPU with 4 CPUs, too few for the
    8-CPU job queued behind it; it goes to b, and a stays whole."""
    nodes = [
        NodeCapacity("a", [0, 1], gpu_type="T4", free_cpus=20.0),
        NodeCapacity("b", [0, 1, 2], gpu_type="T4", free_cpus=64.0),
    ]
    result = plan([_job("big", cpus=16), _job("small", cpus=8)], nodes)
    assert {d.job.job_id: d.placements[0].node_id for d in result.decisions} == {"big": "b", "small": "b"}
    assert nodes[0].free_gpus == [0, 1]


def _sharing(
    node_id: str, free: list[int], shares: dict[int, int], cpus: float | None = 64.0
) -> NodeCapacity:
    total = len(free) + len(shares)
    return NodeCapacity(
        node_id, free, total_gpus=total, gpu_type="H100", sharing=True, shares=shares, free_cpus=cpus
    )


def test_a_share_keeps_a_node_s_last_whole_gpu_for_the_whole_gpu_asks() -> None:
    """n1's GPU 0 has 200 thousandths left: a 300 share opening n1's last free GPU (the
    sharing node with the fewest) would leave no room for a whole GPU there."""
    nodes = [_sharing("n1", [1], {0: 800}), _sharing("n2", [0, 1], {})]
    whole_asks = WorkloadMix({(None, 0.0, 0, 1000): 3, (None, 0.0, 0, 300): 1})
    assert NodeIndex(copy.deepcopy(nodes), whole_asks).share_slot("H100", 300) == ("n2", 0)
    only_shares = WorkloadMix({(None, 0.0, 0, 300): 1})  # 700 left on n1's GPU 1 still holds them
    assert NodeIndex(copy.deepcopy(nodes), only_shares).share_slot("H100", 300) == ("n1", 1)
    assert NodeIndex(copy.deepcopy(nodes)).share_slot("H100", 300) == ("n1", 1)
    # Nodes that report no CPUs or memory are placed by best fit alone.
    gpu_only = [_sharing("n1", [1], {0: 800}, cpus=None), _sharing("n2", [0, 1], {}, cpus=None)]
    assert NodeIndex(gpu_only, whole_asks).share_slot("H100", 300) == ("n1", 1)


@pytest.mark.parametrize("cpus", [None, 64.0])
def test_where_nothing_changes_nothing_is_stranded(cpus: float | None) -> None:
    """A GPU left free and no CPUs asked (or none counted): best fit, at its cost."""
    nodes = [
        NodeCapacity(f"n{i}", list(range(free)), total_gpus=8, free_cpus=cpus)
        for i, free in enumerate((3, 2, 8))
    ]
    mix = WorkloadMix({(None, 8.0, 0, 1000): 1, (None, 0.0, 0, 500): 1})
    assert NodeIndex(nodes, mix).whole_fit("", 1) == (0, 2, "n1")
