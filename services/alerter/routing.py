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
        - match: {rule: GpuUnhealthy}
          receiver: team-chat
          group_by: [node]          # one message per node, however many GPUs fail
          group_wait: 30s           # wait this long for the rest of a new group
          group_interval: 5m        # then at most one message per group this often
          repeat_interval: 4h       # still firing, nobody acknowledged: say it again

An alert's labels are its own plus ``rule``, ``alertname`` and ``severity``. The file is
re-read when it changes; one that does not validate is refused with the line and field at
fault, and the routing in force stays. No file: alerts are stored and listed, and sent
nowhere.

Grouping works as Alertmanager's does, and a child route inherits what it does not set:
``group_by`` picks the labels whose values make a group (``[...]``, the default, puts every
alert in a group of its own); a new group's first message waits ``group_wait`` for the rest
of the group; later changes to it are batched and sent at most once per ``group_interval``;
an alert still firing and not acknowledged is sent again after ``repeat_interval``. The
defaults (``0s``, ``0s``, ``4h``) send every change at once. Durations are seconds or
``30s``/``5m``/``4h``/``1h30m``. One difference from Alertmanager: a batch carries the
alerts that changed, not the whole group again. PagerDuty gets one event per alert (its
``dedup_key``), timed with the group, since the Events API takes one event per request.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, HttpUrl, model_validator

from shared.yamlconfig import ConfigError, WatchedFile, parse_yaml

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


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def parse_duration(value: object) -> object:
    """``90``, ``"90s"``, ``"5m"``, ``"1h30m"`` -> seconds; anything else is left for the
    field's own validation to refuse."""
    if not isinstance(value, str):
        return value
    if (m := _DURATION.match(value.strip())) and any(m.groups()):
        hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
        return hours * 3600 + minutes * 60 + seconds
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a duration: give seconds, or e.g. 30s, 5m, 4h, 1h30m") from None


Duration = Annotated[float, BeforeValidator(parse_duration), Field(ge=0, le=30 * 86_400)]
PositiveDuration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0, le=30 * 86_400)]
EVERY_LABEL = "..."


@dataclass(frozen=True)
class Grouping:
    """The group an alert falls in for one route, and that route's timing."""

    key: str  # Alertmanager's form: the route's matchers, then the group's label values
    labels: dict[str, str]
    wait_s: float
    interval_s: float
    repeat_s: float


IMMEDIATE = Grouping(key="", labels={}, wait_s=0.0, interval_s=0.0, repeat_s=4 * 3600.0)


class Route(_Strict):
    match: dict[str, str] = Field(default_factory=dict)
    receiver: str | None = None
    receivers: list[str] = Field(default_factory=list)
    escalate: Escalation | None = None
    # Unset: inherited from the parent route (the root's defaults are in ``grouping``).
    group_by: list[str] | None = Field(default=None, max_length=20)
    group_wait: Duration | None = None
    group_interval: Duration | None = None
    repeat_interval: PositiveDuration | None = None
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

    def grouping(self, labels: dict[str, str], fingerprint: str) -> Grouping:
        """The group of an alert under the deepest matching route, with the timing that
        route sets or inherits."""
        group_by: list[str] = [EVERY_LABEL]
        timing = [IMMEDIATE.wait_s, IMMEDIATE.interval_s, IMMEDIATE.repeat_s]
        path = self.path(labels)
        for route in path:
            group_by = route.group_by if route.group_by is not None else group_by
            for i, value in enumerate((route.group_wait, route.group_interval, route.repeat_interval)):
                timing[i] = value if value is not None else timing[i]
        if EVERY_LABEL in group_by:
            group = {"fingerprint": fingerprint}
        else:
            group = {name: labels.get(name, "") for name in sorted(group_by)}
        where = "/".join(_braces(route.match) for route in path)
        return Grouping(f"{where}:{_braces(group)}", group, *timing)


def _braces(labels: dict[str, str]) -> str:
    return "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items())) + "}"


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

    def receiver(self, name: str) -> Receiver | None:
        return next((r for r in self.receivers if r.name == name), None)

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
