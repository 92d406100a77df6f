"""Built-in rules: which events raise which alert.

A rule maps an event to an ``AlertDraft`` (or nothing). The fingerprint identifies
"the same problem", so the same failure reported twice stays one alert.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.alert_rules import EventRule, EventRules, Severity
from shared.events import (
    Event,
    JobFailed,
    NodeDrained,
    NodeRegistered,
    NodeUndrained,
    NodeUnreachable,
    TaskOverLimit,
)

# Alerts of these rules report a thing that happened, not a state that lasts: they are
# told once — never repeated, and not sent after a silence that covered them ends.
ONE_SHOT_RULES = ("JobFailed", "GpuOverLimit")


@dataclass(frozen=True)
class AlertDraft:
    rule: str
    fingerprint: str
    severity: Severity
    summary: str
    labels: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)


def drafted(
    rule: EventRule,
    name: str,
    fingerprint: str,
    summary: str,
    labels: dict[str, str],
    severity: Severity | None = None,
) -> AlertDraft:
    """An alert of ``rule``: its severity (unless given), its labels under the alert's own
    (which win on a clash: they are facts), its annotations and runbook."""
    return AlertDraft(
        name,
        fingerprint,
        severity or rule.severity,
        summary,
        {**rule.labels, **labels},
        rule.extra_annotations(),
    )


def draft_for(event: Event, rules: EventRules) -> AlertDraft | None:
    """The alert an event raises, as the rules in force describe it."""
    match event:
        case JobFailed(data=data):
            summary = f"job {data.job_id} failed: {data.reason or 'no reason given'}"
            fingerprint = f"JobFailed/{data.job_id}/{data.generation}"
            return drafted(rules.job_failed, "JobFailed", fingerprint, summary, {"job": data.job_id})
        case TaskOverLimit(data=data):
            # The job's alert (routed to its owner, as job_failed's), naming where it ran.
            then = "its node stopped it" if data.action == "killed" else "it runs on"
            summary = (
                f"job {data.job_id}: a task used {data.used_mb} MiB of GPU {data.gpu_index} on node"
                f" {data.node_id}, over its share of {data.limit_mb} MiB; {then}"
            )
            labels = {"job": data.job_id, "node": data.node_id, "gpu": str(data.gpu_index)}
            fingerprint = f"GpuOverLimit/{data.attempt_id}"
            return drafted(
                rules.gpu_over_limit, "GpuOverLimit", fingerprint, summary, {**labels, "action": data.action}
            )
        case NodeUnreachable(data=data):
            summary = f"node {data.node_id} sent no heartbeat for {data.last_heartbeat_age_s:.0f}s"
            return drafted(
                rules.node_unreachable,
                "NodeUnreachable",
                f"NodeUnreachable/{data.node_id}",
                summary,
                {"node": data.node_id},
            )
        case NodeDrained(data=data) if data.drained_by == "monitor":
            # A health rule drained it (an admin's own drain needs no page); critical when
            # the drain evicts: the GPU is gone.
            return drafted(
                rules.gpu_unhealthy,
                "GpuUnhealthy",
                f"GpuUnhealthy/{data.node_id}",
                f"node {data.node_id} drained: {data.reason}",
                {"node": data.node_id, "evict": str(data.evict).lower()},
                severity="critical" if data.evict else None,
            )
        case _:
            return None


def resolutions(event: Event) -> list[tuple[str, str]]:
    """The (fingerprint, why) of the alerts an event shows to be over."""
    match event:
        case NodeRegistered(data=data):
            return [(f"NodeUnreachable/{data.node_id}", f"node {data.node_id} is heard again")]
        case NodeUndrained(data=data):
            return [(f"GpuUnhealthy/{data.node_id}", f"node {data.node_id} undrained by {data.undrained_by}")]
        case _:
            return []
