"""``corral alerts``, ``ack``, ``resolve``; ``corral silences``, ``silence``, ``unsilence``;
``corral alert-rules [show | set FILE | reset]``."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
import yaml

from corral.commands.errors import UsageProblem
from corral.commands.output import JsonFlag, echo_json, echo_result, echo_table, when
from corral.commands.session import client
from corral.sdk.models import Alert, AlertRules, Matcher, Silence

_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class AlertState(StrEnum):
    firing = "firing"
    acknowledged = "acknowledged"
    resolved = "resolved"


class RulesAction(StrEnum):
    show = "show"
    set = "set"
    reset = "reset"


NoteOption = Annotated[str, typer.Option("--note", help="shown in the alert's history")]
AlertArg = Annotated[str, typer.Argument(metavar="ALERT")]


def alert_rows(alerts: list[Alert]) -> list[list[str]]:
    return [
        [
            a.id,
            a.severity.upper(),
            a.state + (f" ({a.acknowledged_by})" if a.state == "acknowledged" else ""),
            a.rule,
            when(a.started_at),
            a.summary,
        ]
        for a in alerts
    ]


def silence_rows(silences: list[Silence]) -> list[list[str]]:
    return [
        [s.id, s.status, ",".join(str(m) for m in s.matchers), when(s.ends_at), s.created_by, s.comment]
        for s in silences
    ]


def parse_duration(text: str) -> int:
    match = _DURATION.match(text)
    if match is None:
        raise UsageProblem(f"{text!r} is not a duration: write e.g. 90m, 2h or 1d")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def parse_matcher(text: str) -> Matcher:
    try:
        return Matcher.parse(text)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from None


def render_rules(shown: AlertRules) -> str:
    lines = [f"# {shown.detail}; overrides version {shown.overrides_version}"]
    if shown.overrides_by:
        lines.append(f"# overrides set by {shown.overrides_by} at {when(shown.overrides_at)}")
    if shown.file:
        lines.append(f"# rules file: {shown.file}")
    if shown.problem:
        lines += [f"# PROBLEM: {line}" for line in shown.problem.splitlines()]
    if shown.rules is not None:
        lines.append(yaml.safe_dump(shown.rules, sort_keys=True).rstrip())
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    @app.command("alerts")
    def alerts(
        ctx: typer.Context,
        state: Annotated[AlertState | None, typer.Option("--state")] = None,
        limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
        json_: JsonFlag = False,
    ) -> None:
        """List alerts, newest first."""
        with client(ctx) as api:
            items = api.list_alerts(state.value if state else None, limit)
        if json_:
            echo_json(items)
        else:
            echo_table(["ALERT", "SEVERITY", "STATE", "RULE", "SINCE (UTC)", "SUMMARY"], alert_rows(items))

    @app.command("ack")
    def ack(ctx: typer.Context, alert_id: AlertArg, note: NoteOption = "", json_: JsonFlag = False) -> None:
        """Acknowledge an alert: I'm on it."""
        with client(ctx) as api:
            answer = api.acknowledge(alert_id, note)
        echo_result(answer, answer.detail, as_json=json_)

    @app.command("resolve")
    def resolve(
        ctx: typer.Context, alert_id: AlertArg, note: NoteOption = "", json_: JsonFlag = False
    ) -> None:
        """Close an alert by hand."""
        with client(ctx) as api:
            answer = api.resolve(alert_id, note)
        echo_result(answer, answer.detail, as_json=json_)

    @app.command("silences")
    def silences(ctx: typer.Context, json_: JsonFlag = False) -> None:
        """List silences and their status."""
        with client(ctx) as api:
            items = api.list_silences()
        if json_:
            echo_json(items)
        else:
            echo_table(["SILENCE", "STATUS", "MATCHERS", "ENDS (UTC)", "BY", "COMMENT"], silence_rows(items))

    @app.command("silence")
    def silence(
        ctx: typer.Context,
        matchers: Annotated[
            list[str], typer.Argument(metavar="MATCHER...", help="label=value, label!=value or label=~regex")
        ],
        duration: Annotated[str, typer.Option("--for", help="how long, e.g. 90m, 2h, 1d")] = "2h",
        comment: Annotated[str, typer.Option("--comment", help="why, for the next on-call engineer")] = "",
        json_: JsonFlag = False,
    ) -> None:
        """Mute matching alerts' notifications for a while (admin); all matchers must match."""
        parsed = [parse_matcher(m) for m in matchers]
        seconds = parse_duration(duration)
        with client(ctx) as api:
            answer = api.silence(parsed, seconds, comment=comment)
        echo_result(answer, f"{answer.id}: {answer.detail}", as_json=json_)

    @app.command("unsilence")
    def unsilence(
        ctx: typer.Context,
        silence_id: Annotated[str, typer.Argument(metavar="SILENCE")],
        json_: JsonFlag = False,
    ) -> None:
        """End a silence now (admin)."""
        with client(ctx) as api:
            answer = api.expire_silence(silence_id)
        echo_result(answer, answer.detail, as_json=json_)

    @app.command("alert-rules")
    def alert_rules(
        ctx: typer.Context,
        action: Annotated[RulesAction, typer.Argument()] = RulesAction.show,
        file: Annotated[
            Path | None, typer.Argument(help="for set: a YAML (or JSON) document of overrides")
        ] = None,
        json_: JsonFlag = False,
    ) -> None:
        """Show the alert rules in force; set overrides from a YAML file, or reset (admin)."""
        with client(ctx) as api:
            if action is RulesAction.show:
                shown = api.get_alert_rules()
                echo_result(shown, render_rules(shown), as_json=json_)
                return
            if action is RulesAction.reset:
                answer = api.reset_alert_rules()
            else:
                answer = api.set_alert_rules(_overrides(file))
        echo_result(answer, answer.detail, as_json=json_)


def _overrides(file: Path | None) -> dict[str, object]:
    if file is None:
        raise UsageProblem("corral alert-rules set FILE: name the YAML file of overrides")
    try:
        document = yaml.safe_load(file.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UsageProblem(f"cannot read {file}: {exc}") from exc
    if document is not None and not isinstance(document, dict):
        raise UsageProblem(f"{file} holds no mapping of overrides")
    return document or {}
