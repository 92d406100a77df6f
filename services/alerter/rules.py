"""Built-in rules: which events raise which alert.

A rule maps an event to an ``AlertDraft`` (or nothing). The fingerprint identifies
"the same problem", so the same failure reported twice stays one alert.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shared.events import Event, JobFailed, NodeDrained, NodeRegistered, NodeUndrained, NodeUnreachable


@dataclass(frozen=True)
class AlertDraft:
    rule: str
    fingerprint: str
    severity: Literal["info", "warning", "critical"]
    summary: str
    labels: dict[str, str]


def draft_for(event: Event) -> AlertDraft | None:
    match event:
        case JobFailed(data=data):
            return AlertDraft(
                rule="JobFailed",
                fingerprint=f"JobFailed/{data.job_id}/{data.generation}",
                severity="warning",
                summary=f"job {data.job_id} failed: {data.reason or 'no reason given'}",
                labels={"job": data.job_id},
            )
        case NodeUnreachable(data=data):
            return AlertDraft(
                rule="NodeUnreachable",
                fingerprint=f"NodeUnreachable/{data.node_id}",
                severity="critical",
                summary=(f"node {data.node_id} sent no heartbeat for {data.last_heartbeat_age_s:.0f}s"),
                labels={"node": data.node_id},
            )
        case NodeDrained(data=data) if data.drained_by == "monitor":
            # A health rule drained it (an admin's own drain needs no page).
            return AlertDraft(
                rule="GpuUnhealthy",
                fingerprint=f"GpuUnhealthy/{data.node_id}",
                severity="critical" if data.evict else "warning",
                summary=f"node {data.node_id} drained: {data.reason}",
                labels={"node": data.node_id, "evict": str(data.evict).lower()},
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
