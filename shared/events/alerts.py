"""Alert events: firing, changes, and the requests the API records for the alerter."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from shared.events.data import EventData
from shared.events.envelope import Envelope

# --- alerts -----------------------------------------------------------------------


class AlertFiringData(EventData):
    alert_id: str
    rule: str
    severity: Literal["info", "warning", "critical"]
    summary: str
    labels: dict[str, str]


class AlertFiring(Envelope):
    type: Literal["corral.alert.firing.v1"] = "corral.alert.firing.v1"
    data: AlertFiringData

    subject_prefix: ClassVar[str] = "corral.alert.firing"


class AlertChangedData(EventData):
    alert_id: str
    rule: str
    fingerprint: str
    state: Literal["acknowledged", "resolved"]
    by: str = Field(description="'alerter' when its cause went away, else the user")
    note: str = ""


class AlertChanged(Envelope):
    """An alert was acknowledged or resolved."""

    type: Literal["corral.alert.changed.v1"] = "corral.alert.changed.v1"
    data: AlertChangedData

    subject_prefix: ClassVar[str] = "corral.alert.changed"


class AlertActionRequestedData(EventData):
    alert_id: str
    action: Literal["acknowledge", "resolve"]
    by: str
    note: str = ""


class AlertActionRequested(Envelope):
    """An on-call engineer's acknowledge or resolve, recorded by the API."""

    type: Literal["corral.alert.action_requested.v1"] = "corral.alert.action_requested.v1"
    data: AlertActionRequestedData

    subject_prefix: ClassVar[str] = "corral.alert.action_requested"


class Matcher(EventData):
    """One condition on an alert label: ``=`` equals, ``!=`` differs, ``=~`` full regex match."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    op: Literal["=", "!=", "=~"] = "="
    value: str = Field(max_length=256)

    @field_validator("value")
    @classmethod
    def _regex_compiles(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("op") == "=~":
            try:
                re.compile(value)
            except (re.error, OverflowError, RecursionError) as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from exc
        return value

    def matches(self, labels: dict[str, str]) -> bool:
        actual = labels.get(self.name, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        return re.fullmatch(self.value, actual) is not None


class SilenceRequestedData(EventData):
    silence_id: str
    action: Literal["create", "expire"]
    by: str
    matchers: list[Matcher] = Field(default_factory=list)
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    comment: str = ""


class SilenceRequested(Envelope):
    """An admin's new silence (or its early end), recorded by the API for the alerter."""

    type: Literal["corral.alert.silence_requested.v1"] = "corral.alert.silence_requested.v1"
    data: SilenceRequestedData

    subject_prefix: ClassVar[str] = "corral.alert.silence_requested"


class AlertRulesRequestedData(EventData):
    """Overrides of the alert rules (``shared.alert_rules``), merged over the rules file;
    ``clear`` drops them (the file alone is in force again)."""

    action: Literal["set", "clear"]
    by: str
    overrides: dict[str, Any] = Field(default_factory=dict)


class AlertRulesRequested(Envelope):
    """An admin's change to the alert rules, recorded by the API for the alerter."""

    type: Literal["corral.alert.rules_requested.v1"] = "corral.alert.rules_requested.v1"
    data: AlertRulesRequestedData

    subject_prefix: ClassVar[str] = "corral.alert.rules_requested"
