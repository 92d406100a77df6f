"""Where alerts go: receivers and a route tree on labels, read from a YAML file.

    receivers:
      - name: oncall
        pagerduty: {routing_key: "R0123...", url: "https://events.pagerduty.com/v2/enqueue"}
      - name: team-chat
        slack: {url: "https://hooks.slack.com/services/..."}
      - name: tooling
        webhook: {url: "http://tooling.internal/alertmanager"}
      - name: oncall-lead
        email: {to: [lead@example.com], from_address: corral@example.com, smtp_host: smtp.internal}
    route:
      receiver: team-chat            # the default
      routes:                        # the first child whose `match` fits wins
        - match: {severity: critical}
          receivers: [oncall, team-chat]
          escalate: {after_s: 900, to: [oncall-lead]}   # not acknowledged in 15 min

An alert's labels are its own plus ``rule`` and ``severity``. The file is re-read when it
changes; one that does not validate is refused with the line and field at fault, and the
routing in force stays. No file: alerts are stored and listed, and sent nowhere.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, model_validator

from services.alerter.yamlconfig import ConfigError, WatchedFile, parse_yaml

log = logging.getLogger(__name__)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WebhookTarget(_Strict):
    url: HttpUrl


class PagerDutyTarget(_Strict):
    routing_key: str = Field(min_length=1, max_length=64)
    url: HttpUrl = HttpUrl("https://events.pagerduty.com/v2/enqueue")


EMAIL = r"^[^@\s]+@[^@\s]+$"
KINDS = ("webhook", "slack", "pagerduty", "email")


class EmailTarget(_Strict):
    to: list[str] = Field(min_length=1, max_length=20)
    from_address: str = Field(pattern=EMAIL)
    smtp_host: str = Field(min_length=1, max_length=253)
    smtp_port: int = Field(default=25, ge=1, le=65535)
    starttls: bool = False

    @model_validator(mode="after")
    def _addresses(self) -> EmailTarget:
        bad = [a for a in self.to if not re.match(EMAIL, a)]
        if bad:
            raise ValueError(f"not e-mail addresses: {bad}")
        return self


class Receiver(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    webhook: WebhookTarget | None = None
    slack: WebhookTarget | None = None
    pagerduty: PagerDutyTarget | None = None
    email: EmailTarget | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Receiver:
        kinds = [k for k in KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(
                f"a receiver has exactly one of {', '.join(KINDS)} (this one has {kinds or 'none'})"
            )
        return self

    @property
    def kind(self) -> Literal["webhook", "slack", "pagerduty", "email"]:
        if self.webhook:
            return "webhook"
        if self.slack:
            return "slack"
        return "pagerduty" if self.pagerduty else "email"


class Escalation(_Strict):
    """Not acknowledged (nor resolved) within ``after_s``: also tell these receivers."""

    after_s: float = Field(gt=0, le=7 * 86_400)
    to: list[str] = Field(min_length=1)


class Route(_Strict):
    match: dict[str, str] = Field(default_factory=dict)
    receiver: str | None = None
    receivers: list[str] = Field(default_factory=list)
    escalate: Escalation | None = None
    routes: list[Route] = Field(default_factory=list)

    @property
    def targets(self) -> list[str]:
        return [*([self.receiver] if self.receiver else []), *self.receivers]

    def path(self, labels: dict[str, str]) -> list[Route]:
        """This route and the matching children below it, outermost first."""
        for child in self.routes:
            if all(labels.get(k) == v for k, v in child.match.items()):
                return [self, *child.path(labels)]
        return [self]

    def pick(self, labels: dict[str, str]) -> list[str]:
        """The receivers of the deepest matching route that names any."""
        for route in reversed(self.path(labels)):
            if route.targets:
                return route.targets
        return []


class Routing(_Strict):
    receivers: list[Receiver] = Field(default_factory=list)
    route: Route = Field(default_factory=Route)

    @model_validator(mode="after")
    def _known_receivers(self) -> Routing:
        names = [r.name for r in self.receivers]
        if len(set(names)) != len(names):
            raise ValueError(f"receiver names must be unique: {names}")
        unknown = sorted({t for t in _all_targets(self.route) if t not in names})
        if unknown:
            raise ValueError(f"routes name receivers that are not defined: {unknown}")
        return self

    def receivers_for(self, labels: dict[str, str]) -> list[Receiver]:
        by_name = {r.name: r for r in self.receivers}
        return [by_name[name] for name in dict.fromkeys(self.route.pick(labels))]

    def escalation_for(self, labels: dict[str, str]) -> tuple[float, list[Receiver]] | None:
        """The deepest matching route's escalation: after how long, to whom."""
        by_name = {r.name: r for r in self.receivers}
        for route in reversed(self.route.path(labels)):
            if route.escalate is not None:
                return route.escalate.after_s, [by_name[name] for name in route.escalate.to]
        return None


def _all_targets(route: Route) -> list[str]:
    escalation = route.escalate.to if route.escalate else []
    return [*route.targets, *escalation, *(t for child in route.routes for t in _all_targets(child))]


RoutingError = ConfigError


def parse_routing(text: str, source: str = "routing") -> Routing:
    return parse_yaml(Routing, text, source)


class RoutingFile(WatchedFile[Routing]):
    """The routing in force, re-read from its file when the file changes."""

    def __init__(self, path: Path | None) -> None:
        super().__init__(Routing, path, Routing(), "routing")

    @property
    def routing(self) -> Routing:
        return self.current
