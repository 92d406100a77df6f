"""Horovod's variables for a job of 2 nodes x 4 GPUs: 8 workers of 1 GPU and a launcher."""

from __future__ import annotations

from services.launcher.agent.environment import Peer
from services.launcher.agent.mpi.environment import horovod_environment

# Workers 0-3 on node-a, 4-7 on node-b; the launcher beside worker 0, serving rendezvous.
LAUNCHER = Peer("launcher", 0, "node-a", "10.0.0.1", {"master": [29500], "rendezvous": [29600]})
WORKERS = [
    Peer(
        "worker",
        i,
        "node-a" if i < 4 else "node-b",
        "10.0.0.1" if i < 4 else "10.0.0.2",
        {"ssh": [22000 + i]},
    )
    for i in range(8)
]
PEERS = [*reversed(WORKERS), LAUNCHER]  # (the claim's order is not the ranks' order)


def test_every_worker_gets_its_global_local_and_cross_rank() -> None:
    for worker in WORKERS:
        env = horovod_environment(PEERS, "worker", worker.index)
        i = worker.index
        assert env == {
            "HOROVOD_RANK": str(i),
            "HOROVOD_SIZE": "8",
            "HOROVOD_LOCAL_RANK": str(i % 4),
            "HOROVOD_LOCAL_SIZE": "4",
            "HOROVOD_CROSS_RANK": str(i // 4),
            "HOROVOD_CROSS_SIZE": "2",
            "HOROVOD_HOSTNAME": worker.node_id,
            "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1",
            "HOROVOD_GLOO_RENDEZVOUS_PORT": "29600",
        }, i


def test_the_launcher_gets_the_rendezvous_and_the_size() -> None:
    assert horovod_environment(PEERS, "launcher", 0) == {
        "HOROVOD_SIZE": "8",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1",
        "HOROVOD_GLOO_RENDEZVOUS_PORT": "29600",
    }


def test_cross_ranks_follow_node_order_when_indices_interleave_nodes() -> None:
    # Workers alternate between nodes: 0, 2 on node-a; 1, 3 on node-b.
    workers = [Peer("worker", i, "node-a" if i % 2 == 0 else "node-b", "h", {"ssh": [1]}) for i in range(4)]
    ranks = {w.index: horovod_environment([LAUNCHER, *workers], "worker", w.index) for w in workers}
    assert [ranks[i]["HOROVOD_LOCAL_RANK"] for i in range(4)] == ["0", "0", "1", "1"]
    assert [ranks[i]["HOROVOD_CROSS_RANK"] for i in range(4)] == ["0", "1", "0", "1"]
    assert {r["HOROVOD_CROSS_SIZE"] for r in ranks.values()} == {"2"}
