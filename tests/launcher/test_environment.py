"""The rendezvous environment every task of a distributed job gets."""

from __future__ import annotations

from services.launcher.agent.environment import Peer, distributed_environment, task_environment
from shared.jobs import JobSpec

SPEC = JobSpec.model_validate(
    {
        "name": "ddp",
        "tasks": [
            {"name": "master", "instances": 1, "command": "x"},
            {"name": "worker", "instances": 3, "command": "x", "ports": {"http": 1}},
        ],
    }
)
PEERS = [
    Peer("worker", 2, "n2", "10.0.0.2", {"http": [30003]}),
    Peer("master", 0, "n1", "10.0.0.1", {"master": [29500]}),
    Peer("worker", 0, "n1", "10.0.0.1", {"http": [30001]}),
    Peer("worker", 1, "n2", "10.0.0.2", {"http": [30002]}),
]


def test_pytorch_variables_rank_by_spec_order() -> None:
    env = distributed_environment(SPEC, "worker", 1, PEERS)
    assert env["MASTER_ADDR"] == "10.0.0.1"
    assert env["MASTER_PORT"] == "29500"
    assert env["WORLD_SIZE"] == "4"
    assert env["RANK"] == "2"
    assert env["NODE_RANK"] == "1"
    assert env["LOCAL_RANK"] == "0"
    assert env["LOCAL_WORLD_SIZE"] == "2"


def test_every_rank_is_distinct_and_the_master_is_rank_zero() -> None:
    ranks = {(p.role, p.index): distributed_environment(SPEC, p.role, p.index, PEERS)["RANK"] for p in PEERS}
    assert ranks[("master", 0)] == "0"
    assert sorted(ranks.values()) == ["0", "1", "2", "3"]


def test_openpai_variables() -> None:
    env = distributed_environment(SPEC, "worker", 0, PEERS)
    assert env["PAI_TASK_ROLE_LIST"] == "master,worker"
    assert env["PAI_CURRENT_TASK_ROLE_NAME"] == "worker"
    assert env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == "0"
    assert env["PAI_TASK_ROLE_TASK_COUNT_worker"] == "3"
    assert env["PAI_HOST_IP_worker_2"] == "10.0.0.2"
    assert env["PAI_PORT_LIST_worker_1_http"] == "30002"
    assert env["PAI_PORT_LIST_master_0_master"] == "29500"


def test_each_port_label_gives_its_port_and_its_path_through_the_proxy() -> None:
    env = task_environment(
        SPEC,
        job_id="job-01jz0000000000000000000000",
        role="worker",
        task_index=1,
        attempt_id="att-1",
        attempt_no=1,
        gpu_indices=[],
        peers=PEERS,
    )
    assert env["CORRAL_PORT_HTTP"] == "30002"
    assert env["CORRAL_PROXY_PATH_HTTP"] == "/proxy/job-01jz0000000000000000000000/worker-1/http/"
    assert "CORRAL_PORT_MASTER" not in env  # another task's label
