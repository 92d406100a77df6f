"""A placement becomes attempts: one ASSIGNED attempt per placed task instance, each
announced to its node (``corral.task.assigned``), in the caller's transaction, with the
job's row locked first (``FOR UPDATE``) like every decision about a job.

Ports are allocated here, per node, so every task can be told every other task's
address before any of them starts: the role's labelled ports, plus a ``master`` port
for the job's first task (the PyTorch rendezvous). Placements are handled several at a
time (``CORRAL_LAUNCHER_PLACEMENT_CONCURRENCY``), by any number of launchers: each takes
its nodes' locks before reading the ports they hold, so no port is given twice on a node
while placements on different nodes go on side by side.
"""

from __future__ import annotations

import random

from services.launcher import repository
from services.launcher.job_keys import has_job_keys, make_job_keys
from services.launcher.outcomes import SOURCE
from shared.db.pool import Connection
from shared.events import TaskAssigned
from shared.events.jobs import TaskAssignedData
from shared.ids import new_attempt_id
from shared.jobs import JobSpec, JobState

# Ports handed to tasks: below Linux's default ephemeral range (32768-60999), from which
# the kernel picks the local port of every outgoing connection on the node, and below
# Kubernetes' NodePort range (30000-32767), which kube-proxy captures on a node that is
# also in a cluster. (Within the ephemeral range, a client socket of the same machine may
# hold a task's master port, and the DDP rendezvous then fails with EADDRINUSE.)
PORT_RANGE = range(20000, 30000)
MASTER_PORT_LABEL = "master"


def free_ports(node_id: str, count: int, taken: set[int]) -> list[int]:
    """``count`` ports of ``PORT_RANGE`` not in ``taken`` (those live attempts hold on the
    node, and those given out already), from a random point on; added to ``taken``."""
    if count == 0:
        return []
    start = random.randrange(len(PORT_RANGE))  # noqa: S311 - spreading, not security
    free = []
    for offset in range(len(PORT_RANGE)):
        port = PORT_RANGE[(start + offset) % len(PORT_RANGE)]
        if port not in taken:
            free.append(port)
            taken.add(port)
            if len(free) == count:
                return free
    raise RuntimeError(f"no free ports left on node {node_id}")


async def create_attempts(conn: Connection, job_id: str, generation: int) -> int:
    """One ASSIGNED attempt per placed task instance of ``generation`` that has none yet,
    each announced to its node; how many it created (none once the job moved on)."""
    job = await repository.lock_job_placement(conn, job_id, generation)
    if (
        job is None
        or job.state != JobState.SCHEDULED
        or job.generation != generation
        or job.cancel_requested_at is not None
    ):
        return 0
    spec = JobSpec.model_validate(job.spec)
    if has_job_keys(job.spec) and job.allocations:
        await make_job_keys(conn, job_id, generation)
    roles = {role.name: role for role in spec.tasks}
    first = (spec.tasks[0].name, 0)
    taken = {node_id: set(ports) for node_id, ports in job.ports_in_use.items()}
    created = 0
    for alloc in job.allocations:
        role = roles[alloc["task_role"]]
        labels = dict(role.ports)
        if (alloc["task_role"], alloc["task_index"]) == first:
            labels[MASTER_PORT_LABEL] = 1
        node_taken = taken.setdefault(alloc["node_id"], set())
        ports = free_ports(alloc["node_id"], sum(labels.values()), node_taken)
        by_label = {}
        for label, count in labels.items():
            by_label[label], ports = ports[:count], ports[count:]
        attempt = repository.NewAttempt(
            id=new_attempt_id(),
            job_id=job_id,
            generation=generation,
            task_role=alloc["task_role"],
            task_index=alloc["task_index"],
            node_id=alloc["node_id"],
            gpu_indices=alloc["gpu_indices"],
            host=alloc["host"],
            ports=by_label,
        )
        event = TaskAssigned(
            source=SOURCE,
            subject=attempt.id,
            data=TaskAssignedData(
                attempt_id=attempt.id,
                job_id=job_id,
                generation=generation,
                task_role=attempt.task_role,
                task_index=attempt.task_index,
                node_id=attempt.node_id,
                gpu_indices=attempt.gpu_indices,
            ),
        )
        if await repository.insert_attempt(conn, attempt, event):
            created += 1
        # (else created already by an earlier delivery or the reconcile loop)
    return created
