"""Packing properties of shares over random clusters (hypothesis): whatever is running and
whatever waits, one cycle never over-commits a GPU, a share is on exactly one GPU of a
node that shares, and a whole-GPU placement never lands on a GPU holding shares."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.model import NodeCapacity, PendingJob, RunningJob, task_demand
from services.scheduler.planner import plan

SHARES = (0.1, 0.25, 0.3, 0.47, 0.5, 0.81, 0.999)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeCapacity], list[RunningJob], list[PendingJob]]:
    nodes: list[NodeCapacity] = []
    running: list[RunningJob] = []
    for n in range(draw(st.integers(1, 5))):
        size, sharing = draw(st.sampled_from([1, 2, 4, 8])), draw(st.booleans())
        shares: dict[int, int] = {}
        whole: list[int] = []
        for gpu in range(size):
            state = draw(st.sampled_from(["free", "whole", "shared"] if sharing else ["free", "whole"]))
            if state == "whole":
                whole.append(gpu)
            elif state == "shared":
                taken = 0
                for k, milli in enumerate(draw(st.lists(st.integers(1, 999), min_size=1, max_size=3))):
                    if taken + milli > 1000:
                        break
                    taken += milli
                    running.append(
                        RunningJob(
                            f"s{n}-{gpu}-{k}",
                            "default",
                            "u",
                            0,
                            "H100",
                            ((f"n{n}", (gpu,)),),
                            shares=(milli,),
                        )
                    )
                shares[gpu] = taken
        if whole:
            running.append(RunningJob(f"w{n}", "default", "u", 0, "H100", ((f"n{n}", tuple(whole)),)))
        free = [g for g in range(size) if g not in shares and g not in whole]
        nodes.append(
            NodeCapacity(f"n{n}", free, total_gpus=size, gpu_type="H100", sharing=sharing, shares=shares)
        )
    pending = [
        PendingJob(
            f"p{i}",
            1,
            0,
            (task_demand("w", draw(st.integers(1, 4)), draw(st.sampled_from((*SHARES, 1, 2, 4)))),),
            topology=draw(st.sampled_from(["pack", "one_per_node", "single_node"])),
        )
        for i in range(draw(st.integers(1, 12)))
    ]
    return nodes, running, pending


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_no_gpu_is_over_committed_and_shares_stay_on_one_gpu_of_a_sharing_node(
    case: tuple[list[NodeCapacity], list[RunningJob], list[PendingJob]],
) -> None:
    nodes, running, pending = case
    sharing = {n.node_id: n.sharing for n in nodes}
    held_whole: dict[tuple[str, int], int] = {}
    held_shares: dict[tuple[str, int], int] = {}
    for job in running:
        for (node_id, gpus), milli in zip(job.slices, job.shares or (0,) * len(job.slices), strict=True):
            for gpu in gpus:
                if milli:
                    held_shares[(node_id, gpu)] = held_shares.get((node_id, gpu), 0) + milli
                else:
                    held_whole[(node_id, gpu)] = held_whole.get((node_id, gpu), 0) + 1

    result = plan(pending, nodes, running=running)

    for decision in result.decisions:
        for p in decision.placements:
            if p.gpu_milli:
                assert len(p.gpu_indices) == 1, "a share spans GPUs"
                assert sharing[p.node_id], "a share on a node that does not share"
                key = (p.node_id, p.gpu_indices[0])
                held_shares[key] = held_shares.get(key, 0) + p.gpu_milli
            else:
                for gpu in p.gpu_indices:
                    held_whole[(p.node_id, gpu)] = held_whole.get((p.node_id, gpu), 0) + 1
    for key, count in held_whole.items():
        assert count == 1, f"GPU {key} given whole {count} times"
        assert key not in held_shares, f"GPU {key} given whole while it holds shares"
    for key, milli in held_shares.items():
        assert milli <= 1000, f"GPU {key} over-committed: {milli} thousandths"
    placed = {d.job.job_id for d in result.decisions}
    assert placed | {w.job_id for w in result.waiting} == {j.job_id for j in pending}
    assert not placed & {w.job_id for w in result.waiting}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(SHARES), min_size=1, max_size=40))
def test_shares_open_a_fresh_gpu_only_when_no_shared_gpu_has_room(shares: list[float]) -> None:
    node = NodeCapacity("n", list(range(64)), gpu_type="H100", sharing=True)
    for i, share in enumerate(shares):
        before = dict(node.shares)
        (decision,) = plan([PendingJob(f"j{i}", 1, 0, (task_demand("w", 1, share),))], [node]).decisions
        gpu = decision.placements[0].gpu_indices[0]
        if gpu not in before:
            milli = round(share * 1000)
            assert all(used + milli > 1000 for used in before.values()), "opened a GPU while one had room"
