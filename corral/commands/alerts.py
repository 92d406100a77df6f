"""``corral alerts``, ``ack``, ``resolve``; ``corral silences``, ``silence``, ``unsilence``;
``corral alert-rules [set FILE | reset]``."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import yaml

from corral.commands.client import CommandError, request
from corral.commands.nodes import table

COMMANDS = ("alerts", "ack", "resolve", "silences", "silence", "unsilence", "alert-rules")
_MATCHER = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(=~|!=|=)(.*)$")
_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def render_alerts(alerts: list[dict[str, Any]]) -> str:
    rows = [
        [
            a["id"],
            a["severity"].upper(),
            a["state"] + (f" ({a['acknowledged_by']})" if a["state"] == "acknowledged" else ""),
            a["rule"],
            a["started_at"][:19].replace("T", " "),
            a["summary"],
        ]
        for a in alerts
    ]
    return table(["ALERT", "SEVERITY", "STATE", "RULE", "SINCE (UTC)", "SUMMARY"], rows)


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    alerts = commands.add_parser("alerts", help="list alerts, newest first")
    alerts.add_argument("--state", choices=("firing", "acknowledged", "resolved"))
    alerts.add_argument("--json", action="store_true", help="print the API's JSON")
    commands.add_parser("silences", help="list silences and their status")
    silence = commands.add_parser("silence", help="mute matching alerts' notifications for a while (admin)")
    silence.add_argument(
        "matchers", nargs="+", help="label=value, label!=value or label=~regex; all must match"
    )
    silence.add_argument(
        "--for", dest="duration", default="2h", help="how long, e.g. 90m, 2h, 1d (default 2h)"
    )
    silence.add_argument("--comment", default="", help="why, for the next on-call engineer")
    unsilence = commands.add_parser("unsilence", help="end a silence now (admin)")
    unsilence.add_argument("silence")
    rules = commands.add_parser(
        "alert-rules", help="show the alert rules in force; set overrides from a YAML file, or reset (admin)"
    )
    rules.add_argument("action", nargs="?", choices=("show", "set", "reset"), default="show")
    rules.add_argument("file", nargs="?", type=Path, help="for set: a YAML (or JSON) document of overrides")
    for verb, text in (("ack", "acknowledge an alert: I'm on it"), ("resolve", "close an alert by hand")):
        sub = commands.add_parser(verb, help=text)
        sub.add_argument("alert")
        sub.add_argument("--note", default="", help="shown in the alert's history")


def parse_matcher(text: str) -> dict[str, str]:
    match = _MATCHER.match(text)
    if match is None:
        raise CommandError(f"{text!r} is not a matcher: write label=value, label!=value or label=~regex")
    return {"name": match.group(1), "op": match.group(2), "value": match.group(3)}


def parse_duration(text: str) -> int:
    match = _DURATION.match(text)
    if match is None:
        raise CommandError(f"{text!r} is not a duration: write e.g. 90m, 2h or 1d")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def render_silences(silences: list[dict[str, Any]]) -> str:
    rows = [
        [
            s["id"],
            s["status"],
            ",".join(f"{m['name']}{m['op']}{m['value']}" for m in s["matchers"]),
            s["ends_at"][:19].replace("T", " "),
            s["created_by"],
            s["comment"],
        ]
        for s in silences
    ]
    return table(["SILENCE", "STATUS", "MATCHERS", "ENDS (UTC)", "BY", "COMMENT"], rows)


def alert_rules(action: str, file: Path | None) -> str:
    if action == "reset":
        return str(request("DELETE", "/api/v1/alert-rules")["detail"])
    if action == "set":
        if file is None:
            raise CommandError("corral alert-rules set FILE: name the YAML file of overrides")
        try:
            document = yaml.safe_load(file.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise CommandError(f"cannot read {file}: {exc}") from exc
        return str(request("PUT", "/api/v1/alert-rules", json=document or {})["detail"])
    shown = request("GET", "/api/v1/alert-rules")
    lines = [f"# {shown['detail']}; overrides version {shown['overrides_version']}"]
    if shown["overrides_by"]:
        lines.append(f"# overrides set by {shown['overrides_by']} at {shown['overrides_at'][:19]}")
    if shown["file"]:
        lines.append(f"# rules file: {shown['file']}")
    if shown["problem"]:
        lines += [f"# PROBLEM: {line}" for line in shown["problem"].splitlines()]
    if shown["rules"] is not None:
        lines.append(yaml.safe_dump(shown["rules"], sort_keys=True).rstrip())
    return "\n".join(lines)


def run(args: argparse.Namespace) -> str:
    if args.command == "alert-rules":
        return alert_rules(args.action, args.file)
    if args.command == "silences":
        return render_silences(request("GET", "/api/v1/silences")["items"])
    if args.command == "silence":
        body = {
            "matchers": [parse_matcher(m) for m in args.matchers],
            "duration_s": parse_duration(args.duration),
            "comment": args.comment,
        }
        answer = request("POST", "/api/v1/silences", json=body)
        return f"{answer['id']}: {answer['detail']}"
    if args.command == "unsilence":
        return str(request("DELETE", f"/api/v1/silences/{args.silence}")["detail"])
    if args.command == "alerts":
        params = {"state": args.state} if args.state else {}
        items = request("GET", "/api/v1/alerts", params=params)["items"]
        return json.dumps(items, indent=2) if args.json else render_alerts(items)
    action = "acknowledge" if args.command == "ack" else "resolve"
    answer = request("POST", f"/api/v1/alerts/{args.alert}/{action}", json={"note": args.note})
    return str(answer["detail"])
