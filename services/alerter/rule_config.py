"""The alert rules file (``alert_rules.yaml``): severities, runbooks, condition thresholds.

Re-read while the alerter runs (``CORRAL_ALERTER_RULES_FILE``, see ``yamlconfig``); the
copy shipped beside this module is the default.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

RULES_PATH = Path(__file__).parent / "alert_rules.yaml"
Severity = Literal["info", "warning", "critical"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EventRule(_Strict):
    severity: Severity
    runbook: str = Field(default="", max_length=500)


class EventRules(_Strict):
    job_failed: EventRule = EventRule(severity="warning")
    node_unreachable: EventRule = EventRule(severity="critical")
    gpu_unhealthy: EventRule = EventRule(severity="warning")


class PendingRule(EventRule):
    enabled: bool = True
    after_s: float = Field(default=3600.0, gt=0)


class IdleRule(EventRule):
    enabled: bool = True
    below_pct: float = Field(default=5.0, gt=0, le=100)
    for_s: float = Field(default=3600.0, ge=30)


class ConditionRules(_Strict):
    job_pending_too_long: PendingRule = PendingRule(severity="warning")
    gpu_idle: IdleRule = IdleRule(severity="warning")


class AlertRules(_Strict):
    events: EventRules = EventRules()
    conditions: ConditionRules = ConditionRules()


@cache
def default_rules(path: Path = RULES_PATH) -> AlertRules:
    return AlertRules.model_validate(yaml.safe_load(path.read_text()))
