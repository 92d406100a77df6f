"""Alerts, silences and the alert rules in force."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from corral.sdk.models.base import Model


class Alert(Model):
    id: str
    rule: str
    severity: str
    state: str = Field(description="firing, acknowledged or resolved")
    summary: str
    labels: dict[str, str] = Field(default_factory=dict)
    started_at: datetime
    updated_at: datetime | None = None
    acknowledged_by: str | None = None
    acknowledged_at: datetime | None = None
    resolved_by: str | None = None
    resolved_at: datetime | None = None


class Transition(Model):
    at: datetime
    from_state: str | None = None
    to_state: str
    actor: str
    note: str = ""


class AlertDetail(Alert):
    history: list[Transition] = Field(default_factory=list)


class AlertActionAccepted(Model):
    alert_id: str
    action: str
    detail: str


_MATCHER = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(=~|!=|=)(.*)$")


class Matcher(Model):
    """One condition on an alert label: ``=`` equals, ``!=`` differs, ``=~`` full regex match."""

    name: str
    op: Literal["=", "!=", "=~"] = "="
    value: str

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value}"

    @classmethod
    def parse(cls, text: str) -> Matcher:
        """``label=value``, ``label!=value`` or ``label=~regex``."""
        match = _MATCHER.match(text)
        if match is None:
            raise ValueError(f"{text!r} is not a matcher: write label=value, label!=value or label=~regex")
        return cls(name=match.group(1), op=match.group(2), value=match.group(3))


class Silence(Model):
    id: str
    matchers: list[Matcher]
    starts_at: datetime
    ends_at: datetime
    status: str = Field(description="pending, active or expired")
    created_by: str
    comment: str = ""
    created_at: datetime | None = None
    expired_by: str | None = None


class SilenceAccepted(Model):
    id: str
    detail: str


class AlertRules(Model):
    rules: dict[str, Any] | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)
    overrides_version: int = 0
    overrides_by: str | None = None
    overrides_at: datetime | None = None
    in_force_version: int | None = None
    file: str | None = None
    problem: str | None = None
    detail: str
