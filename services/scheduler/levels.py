"""Each pending job's service level for one cycle, and which ones the starvation guard
promotes (planner.py, "Least attained service").

Apart from ``planner.py`` because it is one rule worked out for the whole queue before the
cycle places anyone, and that module has the placement, preemption and explanation rules.

A job's level is how many of ``service_thresholds_gpu_s`` its attained service has
passed; a promoted job's is -1: it ranks before, and may preempt, every job of its
priority. Candidates (pending ``starve_after_s``, no wider than ``starve_max_share`` of
the cluster) are promoted longest wait first while the promoted jobs — those already
placed as promoted (``RunningJob.promoted``, kept in ``scheduler.allocations``) and those
promoted now — hold at most ``starve_budget_share`` of the cluster's GPUs; the first that
does not fit stops the promotions behind it, as an EASY reservation stops backfill, so
the budget goes to the longest waits and the rest of the cluster stays with least
attained service.

Each rule is there because the simpler form failed on the trace slices
(docs/performance.md, "Scheduling policies"): with no budget, the guard promoted hundreds
of jobs on the overloaded slices and cost them up to twice the average JCT; promoting
64-GPU gangs, half of a 16-node cluster, for days cost more than every other promotion
together, hence the width limit; and the limit itself is load-aware (starvation.py)
because no fixed one suited both a lightly and a heavily loaded cluster.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from services.scheduler.model import PendingJob, PlanSettings, RunningJob

PROMOTED = -1  # the level of a promoted job: before every other of its priority


def service_levels(
    pending: Sequence[PendingJob], running: Sequence[RunningJob], settings: PlanSettings, cluster_gpus: int
) -> dict[str, int]:
    """By job id. One loop with the settings' parts in locals, not a call per job: the
    order needs every job's level, every cycle."""
    thresholds, starve_after_s = settings.service_thresholds_gpu_s, settings.starve_after_s
    levels = {}
    candidates = []
    for job in pending:
        if job.waited_s >= starve_after_s and settings.promotable(job.waited_s, job.gpus, cluster_gpus):
            candidates.append(job)
        # settings.service_level(job.attained_gpu_s), inlined
        levels[job.job_id] = bisect.bisect_right(thresholds, job.attained_gpu_s)
    if candidates:
        held = sum(r.gpus for r in running if r.promoted)
        budget = settings.starve_budget_share * cluster_gpus
        candidates.sort(key=lambda job: -job.waited_s)  # stable: by submission among equal waits
        for job in candidates:
            if held + job.gpus > budget:
                break
            held += job.gpus
            levels[job.job_id] = PROMOTED
    return levels
