"""The judgement of a chaos run: what Corral promised, counted against what happened.

Pure functions of what the run gathered (``Evidence``), so the rules can be read in one
place and checked without a stack. Each count is a broken promise, and any one above
zero fails the run (``FAILING``):

- ``lost_jobs``: a planned job that never got in, or did not end in the state it
  deserved (or that the API would not show at the end);
- ``double_launches``: tasks with two live copies that a lost lease does not explain
  (``ledger.unexplained_overlaps``), plus copies still running at the end that no job
  needs (their job ended, or a later attempt replaced them);
- ``missed_events`` / ``missed_webhooks``: ended jobs whose terminal event (the one
  matching the job's state) the SSE subscriber / the webhook receiver never got;
- ``succeeded_without_end``: a task of a SUCCEEDED job whose deciding attempt never
  wrote its ``end`` record: Corral called it done before it was;
- ``doubled_submits``: jobs Corral holds beyond those submitted (a retried submit
  that created a second job despite its ``Idempotency-Key``).

``max_recovery_s`` is, over every fault, the time from the signal to the next submit
Corral accepted. It is ``null`` when some fault had no accepted submit after it.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from bench.chaos.faults import Kill
from bench.chaos.jobs import JobPlan, Submission
from bench.chaos.ledger import Copy, overlaps, unexplained_overlaps

ENDED = {
    "SUCCEEDED": "corral.job.succeeded.v1",
    "FAILED": "corral.job.failed.v1",
    "CANCELLED": "corral.job.cancelled.v1",
}
FAILING = (
    "lost_jobs",
    "double_launches",
    "missed_events",
    "missed_webhooks",
    "succeeded_without_end",
    "doubled_submits",
)


@dataclass
class Evidence:
    seed: int
    plans: list[JobPlan]
    submissions: list[Submission]
    jobs: dict[str, dict[str, Any]]  # job id -> the API's view at the end, attempts included
    jobs_held: int  # jobs of the run's name Corral lists
    copies: dict[str, Copy]
    alive: set[str]
    ledger_now: float  # wall clock when ``alive`` was read
    sse_terminal: dict[str, str]
    webhook_terminal: dict[str, str]
    kills: list[Kill]
    accepted_at: list[float]
    allowed_overlap_s: float
    duration_s: float
    extra: dict[str, Any] = field(default_factory=dict)


def judge(evidence: Evidence) -> tuple[dict[str, Any], list[str]]:
    """The verdict (keys in the documented order) and one line per finding, for a human."""
    findings: list[str] = []
    lost = _lost_jobs(evidence, findings)
    lost_attempts = {
        a["id"] for job in evidence.jobs.values() for a in job.get("attempts", []) if a["state"] == "LOST"
    }
    found = overlaps(evidence.copies, evidence.alive, evidence.ledger_now)
    unexplained = unexplained_overlaps(found, lost_attempts, evidence.allowed_overlap_s)
    for o in unexplained:
        findings.append(f"double launch: {o.task} {o.older} and {o.newer} both alive {o.seconds:.1f} s")
    stale = _stale_alive(evidence)
    for attempt in sorted(stale):
        copy = evidence.copies[attempt]
        findings.append(f"still running at the end: {copy.task} attempt {attempt} on {copy.node}")
    recoveries = _recoveries(evidence.kills, evidence.accepted_at)
    submitted = {s.job_id for s in evidence.submissions if s.job_id}
    verdict: dict[str, Any] = {
        "jobs": len(evidence.plans),
        "kills_by_target": dict(sorted(Counter(k.kind for k in evidence.kills).items())),
        "lost_jobs": lost,
        "double_launches": len({o.task for o in unexplained}) + len(stale),
        "max_overlap_s": round(max((o.seconds for o in found), default=0.0), 2),
        "missed_events": _missed(evidence, evidence.sse_terminal, "SSE event", findings),
        "missed_webhooks": _missed(evidence, evidence.webhook_terminal, "webhook", findings),
        "max_recovery_s": _max_recovery(recoveries),
        "seed": evidence.seed,
        "recovery_s_by_target": _by_target(recoveries),
        "succeeded_without_end": _without_end(evidence, findings),
        "doubled_submits": max(0, evidence.jobs_held - len(submitted)),
        "duration_s": round(evidence.duration_s, 1),
        **evidence.extra,
    }
    return verdict, findings


def failed(verdict: dict[str, Any]) -> bool:
    return any(verdict[key] for key in FAILING)


def _lost_jobs(evidence: Evidence, findings: list[str]) -> int:
    """Jobs never accepted, or not ended as they deserved (or not shown by the API)."""
    accepted = {s.plan.key: s.job_id for s in evidence.submissions if s.job_id}
    lost = 0
    for plan in evidence.plans:
        job_id = accepted.get(plan.key)
        job = evidence.jobs.get(job_id or "")
        state = None if job is None else job["state"]
        if state != plan.deserved:
            lost += 1
            what = "was never accepted" if job_id is None else f"({job_id}) is {state}"
            findings.append(f"lost job: {plan.key} {what}, deserved {plan.deserved}")
    return lost


def _missed(evidence: Evidence, seen: dict[str, str], what: str, findings: list[str]) -> int:
    missed = 0
    for job_id, job in evidence.jobs.items():
        wanted = ENDED.get(job["state"])
        if wanted is not None and seen.get(job_id) != wanted:
            missed += 1
            findings.append(f"missed {what}: {job_id} ended {job['state']}, got {seen.get(job_id)}")
    return missed


def _stale_alive(evidence: Evidence) -> set[str]:
    """Copies still running at the end that no job needs: their job has ended, or a
    later attempt of their task replaced them. The latest attempt of a job that ran out
    of time, or of one the API did not show, is not a double launch: that job counts as
    lost instead."""
    latest: dict[tuple[str, str, int], int] = {}
    for job_id, job in evidence.jobs.items():
        for attempt in job.get("attempts", []):
            task = (job_id, attempt["task_role"], attempt["task_index"])
            latest[task] = max(latest.get(task, 0), attempt["attempt_no"])
    stale = set()
    for attempt_id in evidence.alive:
        copy = evidence.copies[attempt_id]
        owner = evidence.jobs.get(copy.job_id)
        if owner is not None and (owner["state"] in ENDED or copy.attempt_no < latest.get(copy.task, 0)):
            stale.add(attempt_id)
    return stale


def _without_end(evidence: Evidence, findings: list[str]) -> int:
    """Tasks of SUCCEEDED jobs whose last attempt has no ``end`` in the ledger."""
    missing = 0
    for job_id, job in evidence.jobs.items():
        if job["state"] != "SUCCEEDED":
            continue
        last: dict[tuple[str, int], dict[str, Any]] = {}
        for attempt in job["attempts"]:
            task = (attempt["task_role"], attempt["task_index"])
            if task not in last or attempt["attempt_no"] > last[task]["attempt_no"]:
                last[task] = attempt
        for task, attempt in sorted(last.items()):
            copy = evidence.copies.get(attempt["id"])
            if copy is None or not copy.ended:
                missing += 1
                findings.append(f"succeeded without end: {job_id} {task} attempt {attempt['id']}")
    return missing


def _recoveries(kills: list[Kill], accepted_at: list[float]) -> list[tuple[str, float | None]]:
    ordered = sorted(accepted_at)
    out: list[tuple[str, float | None]] = []
    for kill in kills:
        after = next((t for t in ordered if t >= kill.at), None)
        out.append((kill.kind, None if after is None else after - kill.at))
    return out


def _max_recovery(recoveries: list[tuple[str, float | None]]) -> float | None:
    if any(seconds is None for _, seconds in recoveries):
        return None
    return round(max((s for _, s in recoveries if s is not None), default=0.0), 2)


def _by_target(recoveries: list[tuple[str, float | None]]) -> dict[str, dict[str, float | None]]:
    by_kind: dict[str, list[float | None]] = defaultdict(list)
    for kind, seconds in recoveries:
        by_kind[kind].append(seconds)
    table: dict[str, dict[str, float | None]] = {}
    for kind, values in sorted(by_kind.items()):
        known = [v for v in values if v is not None]
        complete = len(known) == len(values)
        table[kind] = {
            "median": round(statistics.median(known), 2) if known else None,
            "max": round(max(known), 2) if known and complete else None,
        }
    return table
