"""Scheduled jobs and their attempts written straight into Postgres, as the scheduler and
launcher would leave them, for tests of what runs attempts (node agent, Kubernetes runner)."""

from __future__ import annotations

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from shared.db.pool import Database
from shared.ids import new_attempt_id
from shared.jobs import JobSpec


async def known_nodes(db: Database, *nodes: str) -> None:
    """Nodes the monitor knows (8 GPUs each, READY)."""
    for node in nodes:
        await db.execute(
            "INSERT INTO monitor.nodes (id, hostname, simulated, state, gpu_count, last_heartbeat)"
            " VALUES ($1, $1, true, 'READY', 8, now())",
            node,
        )


async def assigned(
    db: Database,
    node: str,
    instances: int = 2,
    state: str = "ASSIGNED",
    command: str = "python train.py",
) -> list[str]:
    """A scheduled gang of ``instances`` one-GPU tasks on ``node``, its attempts in
    ``state``; their ids."""
    spec = JobSpec.model_validate(
        {
            "name": "train",
            "allow_host_execution": True,  # (its image is not what these tests are about)
            "tasks": [
                {
                    "name": "worker",
                    "instances": instances,
                    "command": command,
                    "image": "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
                    "resources": {"gpus": 1},
                }
            ],
        }
    )
    job_id = (await Submitter(JobRepository(db)).submit(spec, "alice", None)).job.id
    await db.execute("UPDATE api.jobs SET state = 'SCHEDULED', generation = 1 WHERE id = $1", job_id)
    attempts: list[str] = []
    for index in range(instances):
        attempt_id = new_attempt_id()
        await db.execute(
            "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no,"
            " node_id, gpu_indices, state, ports) VALUES ($1, $2, 1, 'worker', $3, 1, $4, $5, $6,"
            " '{\"master\": [29500]}')",
            attempt_id,
            job_id,
            index,
            node,
            [index],
            state,
        )
        attempts.append(attempt_id)
    return attempts
