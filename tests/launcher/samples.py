"""A task launch as the Kubernetes driver receives it: one sample for the tests that
build manifests from one (each varies it with ``dataclasses.replace``)."""

from __future__ import annotations

from services.launcher.drivers import TaskLaunch

TASK_LAUNCH = TaskLaunch(
    attempt_id="att-01m81sd0000000000000000001",
    job_id="job-01m81scc9vkd1fesxk1gz86zrz",
    generation=2,
    task_role="worker",
    task_index=3,
    attempt_no=2,
    node_id="gpu-node-3",
    command="python train.py --epochs 3 && echo 'done'",
    env={"MASTER_ADDR": "10.0.0.1", "PAI_TASK_ROLE_LIST": "worker", "PAI_TASK_ROLE_TASK_COUNT_worker": "4"},
    gpu_indices=(0, 1, 2, 3),
    gpus=4,
    cpus=16.0,
    memory_mb=65536,
    image="nvcr.io/nvidia/pytorch:24.05-py3",
)
