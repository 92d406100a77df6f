"""EASY backfill's reservation: the free GPUs withheld for the first job that waits for capacity.

The planner (``planner.py``: "Backfill with a reservation") asks for one per cycle at
most. The nodes that will hold the job soonest are found by a what-if on the node
index: the running jobs of its GPU type give their GPUs back in the order they are
expected to end (at their ``max_runtime_s``; jobs without one, oldest first, last) until
the job fits. Everything is taken again, then the GPUs of that placement that are free
now are withheld: only jobs that end before ``start_s`` may use them (backfill).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from services.scheduler.model import PendingJob, RunningJob
from services.scheduler.node_index import NodeIndex
from services.scheduler.placement import place_gang, unplace
from services.scheduler.what_if import Given, give_back, take_again


@dataclass
class Reservation:
    job_id: str
    gpus: dict[str, list[int]]  # withheld free GPUs, by node
    start_s: float  # when the job is expected to fit (inf: not known)

    def held(self) -> int:
        return sum(len(gpus) for gpus in self.gpus.values())


def find_reservation(
    job: PendingJob,
    gpu_type: str,
    index: NodeIndex,
    running_of_type: Sequence[RunningJob],
    claimed: Collection[str],
) -> Reservation | None:
    """Withhold (take from ``index``) the free GPUs of the nodes that will hold ``job``
    soonest; None when it cannot fit even once every running job (not ``claimed`` as a
    victim already) has ended, e.g. its nodes are unhealthy: then nothing is held."""
    # Soonest to end first. A heap: the search usually stops after a few of the thousands
    # of running jobs.
    releases = [
        (
            (False, r.max_runtime_s - r.runtime_s, r.job_id, n)
            if r.max_runtime_s is not None
            else (True, -r.runtime_s, r.job_id, n)
        )
        for n, r in enumerate(running_of_type)
        if r.job_id not in claimed
    ]
    heapq.heapify(releases)
    given: list[Given] = []
    start_s = 0.0
    placements = None
    while releases:
        running = running_of_type[heapq.heappop(releases)[3]]
        given.extend(give_back(index, running))
        remaining = (
            (running.max_runtime_s - running.runtime_s) if running.max_runtime_s is not None else math.inf
        )
        start_s = max(start_s, remaining, 0.0)
        placements = place_gang(job, index, gpu_type)
        if placements is not None:
            break
    if placements is not None:
        unplace(index, job, placements)
    take_again(index, given)
    if placements is None:
        return None
    busy = {(node_id, g) for node_id, gpus, _ in given for g in gpus}
    withheld: dict[str, list[int]] = {}
    for placement in placements:
        node_id = placement.node_id
        now_free = [g for g in placement.gpu_indices if (node_id, g) not in busy]
        # GPUs of the placement that were free before the what-if are withheld now.
        if now_free:
            index.take_exact(node_id, now_free)
            withheld.setdefault(node_id, []).extend(now_free)
    return Reservation(job.job_id, withheld, start_s)
