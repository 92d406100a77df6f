"""``corral alerts``, ``ack``, ``resolve``; ``corral silences``, ``silence``, ``unsilence``."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from corral.commands.client import CommandError, request
from corral.commands.nodes import table

COMMANDS = ("alerts", "ack", "resolve", "silences", "silence", "unsilence")
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


def run(args: argparse.Namespace) -> str:
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
