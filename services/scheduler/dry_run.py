"""Answer dry runs (``shared/dry_run.py``): the policy over a fresh snapshot plus the
asked-about job, read-only, nothing committed or announced."""

from __future__ import annotations

import logging
from collections.abc import Callable

from pydantic import ValidationError

from services.scheduler.cycle import MAX_PENDING_PER_CYCLE
from services.scheduler.model import PendingJob, task_demand
from services.scheduler.planner import PlanSettings, plan
from services.scheduler.snapshot import load_snapshot
from shared.db.pool import DATABASE_ERRORS, Database
from shared.dry_run import DryRunAnswer, DryRunPlacement, DryRunRequest

log = logging.getLogger(__name__)
CANDIDATE = "dry-run"  # the asked-about job's id in the plan: no real id looks like it


async def answer_dry_run(db: Database, policy: Callable[[], PlanSettings], payload: bytes) -> bytes:
    """``policy``: the settings the live cycle applies now (its starvation limit moves)."""
    try:
        request = DryRunRequest.model_validate_json(payload)
    except ValidationError as exc:
        return (
            DryRunAnswer(placeable_now=False, error=f"not a dry-run request: {exc}")
            .model_dump_json()
            .encode()
        )
    try:
        async with db.connection() as conn:
            snapshot = await load_snapshot(conn, MAX_PENDING_PER_CYCLE, release=False)
    except DATABASE_ERRORS as exc:
        log.warning("dry run unanswered: database unavailable (%s)", exc)
        return (
            DryRunAnswer(placeable_now=False, error="the database is unavailable").model_dump_json().encode()
        )
    spec = request.spec
    candidate = PendingJob(
        CANDIDATE,
        0,
        priority=spec.priority,
        tasks=tuple(task_demand(t.name, t.instances, t.resources.gpus) for t in spec.tasks),
        vc=spec.virtual_cluster,
        user=request.user,
        gpu_type=spec.gpu_type,
        topology=spec.topology,
        max_runtime_s=spec.max_runtime_s,
        service=spec.kind == "service",
    )
    result = plan(
        [*snapshot.pending, candidate],
        snapshot.nodes,
        running=snapshot.running,
        vcs=snapshot.vcs,
        largest_unready_node=snapshot.largest_unready_node,
        settings=policy(),
    )
    answer = DryRunAnswer(placeable_now=False, pending_jobs=len(snapshot.pending))
    for decision in result.decisions:
        if decision.job.job_id == CANDIDATE:
            answer.placeable_now = True
            answer.borrowed = decision.borrowed
            answer.estimated_start_s = 0.0
            answer.placements = [
                DryRunPlacement(
                    task_role=p.role, task_index=p.index, node_id=p.node_id, gpu_indices=list(p.gpu_indices)
                )
                for p in decision.placements
            ]
    for waiting in result.waiting:
        if waiting.job_id == CANDIDATE:
            answer.reason, answer.detail = waiting.reason, waiting.detail
            answer.position, answer.estimated_start_s = waiting.position, waiting.estimated_start_s
    answer.would_preempt = [p.job_id for p in result.preemptions if p.for_job == CANDIDATE]
    return answer.model_dump_json().encode()
