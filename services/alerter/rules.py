"""Built-in rules: which events raise which alert.

A rule maps an event to an ``AlertDraft`` (or nothing). The fingerprint identifies
"the same problem", so the same failure reported twice stays one alert.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from services.alerter.rule_config import EventRule, EventRules
from shared.events import Event, JobFailed, NodeDrained, NodeRegistered, NodeUndrained, NodeUnreachable


@dataclass(frozen=True)
class AlertDraft:
    rule: str
    fingerprint: str
    severity: Literal["info", "warning", "critical"]
    summary: str
    labels: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)


def _runbook(rule: EventRule) -> dict[str, str]:
    return {"runbook_url": rule.runbook} if rule.runbook else {}


def draft_for(event: Event, rules: EventRules) -> AlertDraft | None:
    """The alert an event raises, with the severity and runbook the rules file gives it."""
    match event:
        case JobFailed(data=data):
            return AlertDraft(
                rule="JobFailed",
                fingerprint=f"JobFailed/{data.job_id}/{data.generation}",
                severity=rules.job_failed.severity,
                summary=f"job {data.job_id} failed: {data.reason or 'no reason given'}",
                labels={"job": data.job_id},
                annotations=_runbook(rules.job_failed),
            )
        case NodeUnreachable(data=data):
            return AlertDraft(
                rule="NodeUnreachable",
                fingerprint=f"NodeUnreachable/{data.node_id}",
                severity=rules.node_unreachable.severity,
                summary=(f"node {data.node_id} sent no heartbeat for {data.last_heartbeat_age_s:.0f}s"),
                labels={"node": data.node_id},
                annotations=_runbook(rules.node_unreachable),
            )
        case NodeDrained(data=data) if data.drained_by == "monitor":
            # A health rule drained it (an admin's own drain needs no page).
            return AlertDraft(
                rule="GpuUnhealthy",
                fingerprint=f"GpuUnhealthy/{data.node_id}",
                severity="critical" if data.evict else rules.gpu_unhealthy.severity,
                summary=f"node {data.node_id} drained: {data.reason}",
                labels={"node": data.node_id, "evict": str(data.evict).lower()},
                annotations=_runbook(rules.gpu_unhealthy),
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
