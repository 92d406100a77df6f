"""What a cycle decides on: the pending jobs, the ready nodes' free GPUs, the running
jobs and the virtual clusters, read in the cycle's transaction (``repository.py``
runs the statements; this module makes the rows into the model the policy takes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from services.scheduler import repository
from services.scheduler.model import NodeCapacity, PendingJob, RunningJob, VirtualCluster
from shared.db.pool import Connection
from shared.gpu_sharing import FRACTION_MODES
from shared.gpu_types import gpu_type_of


@dataclass
class Snapshot:
    pending: list[PendingJob]
    nodes: dict[str, NodeCapacity]
    running: list[RunningJob]
    vcs: dict[str, VirtualCluster]
    largest_unready_node: int  # GPUs on the biggest registered node that is not ready


class PendingJobs:
    """The pending jobs as the last read left them, kept from one cycle to the next.

    What a job asks for (its spec: roles, GPUs, type, topology, limit; its priority, VC
    and owner) never changes after submit, and was validated then. So a cycle reads
    four columns per pending job, and the demands — pre-extracted from the spec by SQL,
    not re-validated — only of the jobs it has not seen yet: with thousands queued, a
    cycle that read them all would spend more on re-reading and re-building the same
    jobs than on deciding.
    """

    def __init__(self) -> None:
        self._jobs: dict[str, PendingJob] = {}

    async def read(self, conn: Connection, max_pending: int) -> list[PendingJob]:
        """The first ``max_pending`` pending jobs, oldest first, as they are now."""
        rows = await repository.pending_queue(conn, max_pending)
        unseen = [row["id"] for row in rows if row["id"] not in self._jobs]
        if unseen:
            for demands in await repository.pending_demands(conn, unseen):
                self._jobs[demands.job_id] = demands
        pending = []
        for row in rows:
            job = self._jobs.get(row["id"])
            if job is not None:
                # Its waits: its age less the time its runs took (attained GPU-seconds
                # over its GPUs: exact for gangs whose instances run alike).
                attained = row["attained_gpu_s"]
                waited = max(0.0, row["age_s"] - (attained / job.gpus if job.gpus else 0.0))
                pending.append(job.progressed(row["version"], row["generation"], attained, waited))
        self._jobs = {job.job_id: job for job in pending}  # forget the ones that left
        return pending


async def load_snapshot(
    conn: Connection, max_pending: int, *, release: bool = True, known: PendingJobs | None = None
) -> Snapshot:
    """Everything a cycle decides on. ``release`` first frees the GPUs of jobs that ended
    (the cycle does; a dry run, which writes nothing, does not — so it reads such GPUs as
    still held: one cycle's lag at most). ``known``: the pending jobs the last cycle read
    (the live cycle keeps them; without, every pending job is read whole)."""
    if release:
        await repository.release_finished_allocations(conn)
    allocations = await repository.live_allocations(conn)
    used: dict[str, set[int]] = {}
    shared: dict[str, dict[int, int]] = {}  # node -> GPU -> thousandths held in shares
    cpus_used: dict[str, float] = {}
    memory_used: dict[str, int] = {}
    for row in allocations:
        node_id = row["node_id"]
        used.setdefault(node_id, set()).update(row["gpu_indices"])
        if row["gpu_milli"]:
            on_node = shared.setdefault(node_id, {})
            gpu = row["gpu_indices"][0]
            on_node[gpu] = on_node.get(gpu, 0) + row["gpu_milli"]
        cpus_used[node_id] = cpus_used.get(node_id, 0.0) + (row["cpus"] or 0.0)
        memory_used[node_id] = memory_used.get(node_id, 0) + (row["memory_mb"] or 0)
    nodes = {}
    for row in await repository.ready_nodes(conn):
        indices = [i for i in row["gpu_indices"] if i is not None]
        domains = dict(zip(indices, (d for d in row["gpu_domains"] if d is not None), strict=True))
        busy = used.get(row["id"], set())
        nodes[row["id"]] = NodeCapacity(
            row["id"],
            [i for i in indices if i not in busy],
            total_gpus=len(indices),
            gpu_type=gpu_type_of(row["model"]) if row["model"] else "",
            rack=row["rack"],
            domains=domains if len(set(domains.values())) > 1 else {},  # one domain: none to keep
            # A node that reports no CPUs or memory (0) puts no limit on them.
            free_cpus=row["cpus"] - cpus_used.get(row["id"], 0.0) if row["cpus"] else None,
            free_memory_mb=row["memory_mb"] - memory_used.get(row["id"], 0) if row["memory_mb"] else None,
            sharing=row["gpu_sharing"] in FRACTION_MODES,
            # A share on a GPU the node no longer reports holds nothing to place around.
            shares={gpu: milli for gpu, milli in shared.get(row["id"], {}).items() if gpu in indices},
            runs_images=bool(row["runs_images"]),
        )
    running = await _running_jobs(conn, allocations, nodes)
    pending = await (known or PendingJobs()).read(conn, max_pending)
    vcs = await repository.virtual_clusters(conn)
    largest_unready = await repository.largest_unready_node(conn, list(nodes))
    return Snapshot(pending, nodes, running, vcs, largest_unready)


async def _running_jobs(
    conn: Connection, rows: Sequence[asyncpg.Record], nodes: dict[str, NodeCapacity]
) -> list[RunningJob]:
    """Placed jobs from their allocation rows (ordered by job), typed by their nodes' GPUs."""
    elsewhere = sorted({r["node_id"] for r in rows} - set(nodes))
    types = {node_id: node.gpu_type for node_id, node in nodes.items()}
    if elsewhere:
        for node_id, model in (await repository.node_models(conn, elsewhere)).items():
            types[node_id] = gpu_type_of(model)
    jobs: list[RunningJob] = []
    slices: list[tuple[str, tuple[int, ...]]] = []
    shares: list[int] = []
    asks: list[tuple[float, int]] = []
    for n, row in enumerate(rows):
        slices.append((row["node_id"], tuple(row["gpu_indices"])))
        shares.append(row["gpu_milli"])
        asks.append((row["cpus"] or 0.0, row["memory_mb"] or 0))
        if n + 1 < len(rows) and rows[n + 1]["job_id"] == row["job_id"]:
            continue
        gpu_nodes = [node for node, gpus in slices if gpus]
        jobs.append(
            RunningJob(
                job_id=row["job_id"],
                vc=row["virtual_cluster"],
                user=row["username"],
                priority=row["priority"],
                gpu_type=types.get(gpu_nodes[0], "") if gpu_nodes else "",
                slices=tuple(slices),
                shares=tuple(shares) if any(shares) else (),
                slice_asks=tuple(asks),
                asked_type=row["gpu_type_asked"],
                borrowed=row["borrowed"],
                promoted=row["promoted"],
                service=bool(row["service"]),
                runtime_s=row["runtime_s"],
                max_runtime_s=row["max_runtime_s"],
                preempting=row["preempting"],
                attained_gpu_s=row["attained_gpu_s"],
                waited_s=_waited_before(row, sum(len(gpus) for _, gpus in slices)),
            )
        )
        slices, shares, asks = [], [], []
    return jobs


def _waited_before(row: asyncpg.Record, gpus: int) -> float:
    """A placed job's waits before this run: from submit to placement, less earlier runs."""
    attained: float = row["attained_gpu_s"]
    placed_after: float = row["placed_after_s"]
    earlier_gpu_s = max(0.0, attained - gpus * row["runtime_s"])
    return max(0.0, placed_after - (earlier_gpu_s / gpus if gpus else 0.0))
