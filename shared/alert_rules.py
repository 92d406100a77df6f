"""What raises an alert, how severe it is, what it carries: the alert rules' model.

The alerter reads them from a YAML file (``services/alerter/alert_rules.yaml`` is the
default, ``CORRAL_ALERTER_RULES_FILE`` your own copy), re-read while it runs; an admin may
override any part through the API (``PUT /api/v1/alert-rules``), merged over the file. The
model lives here so that the API refuses a bad override with the same messages the
alerter would give, before anything is recorded.

Every rule has a severity, a runbook (a page name of docs/runbooks, which the alerter makes
a link under ``CORRAL_ALERTER_RUNBOOK_BASE_URL``, or a URL of the site's own), and labels
and annotations of its own: labels take part in routing, silences and grouping
(``team: infra``), annotations are text for the reader. Every field has a default, so a
document may give only what it changes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Severity = Literal["info", "warning", "critical"]


class _Strict(BaseModel):
    # Strict types too: a rules document's values are what the schema says (no 0 for false),
    # whether it comes as an API request or in the rules file.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class EventRule(_Strict):
    severity: Severity = "warning"
    runbook: str = Field(default="", max_length=500)
    # Added to the alert's own labels (which win on a clash: ``node``, ``job`` ... are facts).
    labels: dict[str, str] = Field(default_factory=dict, max_length=20)
    annotations: dict[str, str] = Field(default_factory=dict, max_length=20)

    def extra_annotations(self) -> dict[str, str]:
        return {**self.annotations, **({"runbook_url": self.runbook} if self.runbook else {})}


class EventRules(_Strict):
    job_failed: EventRule = EventRule(severity="warning")
    node_unreachable: EventRule = EventRule(severity="critical")
    gpu_unhealthy: EventRule = EventRule(severity="warning")
    gpu_over_limit: EventRule = EventRule(severity="warning")


class PendingRule(EventRule):
    enabled: bool = True
    after_s: float = Field(default=3600.0, gt=0)


class IdleRule(EventRule):
    enabled: bool = True
    below_pct: float = Field(default=5.0, gt=0, le=100)
    for_s: float = Field(default=3600.0, ge=30)


class StarvedRule(EventRule):
    """A virtual cluster whose jobs have waited ``after_s`` while none of its jobs started."""

    enabled: bool = True
    after_s: float = Field(default=1800.0, gt=0)


class ServiceDownRule(EventRule):
    """A Corral service none of whose instances was heard for ``after_s``."""

    enabled: bool = True
    after_s: float = Field(default=60.0, ge=10)
    severity: Severity = "critical"
    # The control plane. (The alerter cannot report its own death: watch it from outside,
    # e.g. its /healthz. Node agents are watched per node: NodeUnreachable.)
    services: list[str] = Field(default=["api", "scheduler", "launcher", "monitor"], max_length=50)


class ConditionRules(_Strict):
    job_pending_too_long: PendingRule = PendingRule(severity="warning")
    gpu_idle: IdleRule = IdleRule(severity="warning")
    vc_starved: StarvedRule = StarvedRule(severity="warning")
    service_down: ServiceDownRule = ServiceDownRule()


class AlertRules(_Strict):
    events: EventRules = EventRules()
    conditions: ConditionRules = ConditionRules()


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``, mapping by mapping (a value that is not a mapping replaces)."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged
