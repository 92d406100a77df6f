"""Estimated start times for the jobs left waiting: a fluid replay of the queue.

Honest about what it knows: the only run times a scheduler has are the users' limits
(``max_runtime_s``). Running jobs are assumed to end at their limit; the waiting jobs, in
queue order, take GPUs as they come free (per GPU type; a job that names no type draws on
all of them) and give them back at their own limit. A job whose GPUs would only come from
jobs without a limit gets no estimate — nor does any job behind it in the same pool, since
its turn depends on that unknown. Fragmentation and quotas are ignored: it is an estimate,
shown as one — except that a job waiting because the free GPUs are spread over too many
nodes (``Fragmented``) is not told "now": it starts when a running job ends, at the
soonest, so its estimate is at least the first known end (none when no end is known).
Jobs waiting for their VC's quota or their user's limit get none: they wait for their
own jobs, whose end is just as unknown.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from services.scheduler.model import ANY_TYPE, PendingJob, PendingReason, RunningJob

NO_ESTIMATE = frozenset({"GangDoesNotFit", "NodesUnhealthy", "UserLimit", "WaitingForQuota"})


@dataclass
class _Pool:
    free: float
    releases: list[tuple[float, float]] = field(default_factory=list)  # (seconds from now, GPUs)
    now_s: float = 0.0
    unknown: bool = False  # an earlier job's turn could not be estimated

    def start_of(self, need: float) -> float | None:
        if self.unknown:
            return None
        while self.free < need and self.releases:
            at, gpus = heapq.heappop(self.releases)
            self.now_s = max(self.now_s, at)
            self.free += gpus
        if self.free < need:
            self.unknown = True
            return None
        self.free -= need
        return self.now_s


def estimate_starts(
    waiting: Sequence[tuple[PendingJob, PendingReason, str]],
    running: Sequence[RunningJob],
    free_by_type: Mapping[str, int],
    reserved_job: str | None,
    reservation_start_s: float,
) -> list[float | None]:
    """Seconds from now until each waiting job (in queue order, with its reason and the
    reason's detail) is expected to start; None where nothing says."""
    pools: dict[str, _Pool] = {}

    def pool(gpu_type: str) -> _Pool:
        if gpu_type not in pools:
            free = sum(free_by_type.values()) if gpu_type == ANY_TYPE else free_by_type.get(gpu_type, 0)
            every_type = gpu_type == ANY_TYPE
            releases = [
                (max(r.max_runtime_s - r.runtime_s, 0.0), r.gpus)
                for r in running
                if r.max_runtime_s is not None and (every_type or r.gpu_type == gpu_type)
            ]
            heapq.heapify(releases)
            pools[gpu_type] = _Pool(free, releases)
        return pools[gpu_type]

    starts: list[float | None] = []
    for job, reason, _ in waiting:
        start: float | None
        if reason == "WaitingForPreemption":
            start = 0.0
        elif reason in NO_ESTIMATE or job.shares:
            # (a share waits for room on a shared GPU, which whole GPUs coming free say nothing of)
            start = None
        else:
            kind = pools.get(job.gpu_type or ANY_TYPE) or pool(job.gpu_type or ANY_TYPE)
            # Most of a long queue is behind a job whose start is unknown: no call for those.
            start = None if kind.unknown else kind.start_of(job.gpus)
            if reason == "Fragmented" and start == 0.0:  # enough free, but on too many nodes
                start = kind.releases[0][0] if kind.releases else None
            if job.job_id == reserved_job and math.isfinite(reservation_start_s):
                start = max(start or 0.0, reservation_start_s)
            if start is not None and job.max_runtime_s is not None:
                heapq.heappush(kind.releases, (start + job.max_runtime_s, job.gpus))
        starts.append(start)
    return starts
