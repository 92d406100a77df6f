"""``corral alerts``, ``corral ack ID``, ``corral resolve ID``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from corral.commands.client import request
from corral.commands.nodes import table

COMMANDS = ("alerts", "ack", "resolve")


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
    for verb, text in (("ack", "acknowledge an alert: I'm on it"), ("resolve", "close an alert by hand")):
        sub = commands.add_parser(verb, help=text)
        sub.add_argument("alert")
        sub.add_argument("--note", default="", help="shown in the alert's history")


def run(args: argparse.Namespace) -> str:
    if args.command == "alerts":
        params = {"state": args.state} if args.state else {}
        items = request("GET", "/api/v1/alerts", params=params)["items"]
        return json.dumps(items, indent=2) if args.json else render_alerts(items)
    action = "acknowledge" if args.command == "ack" else "resolve"
    answer = request("POST", f"/api/v1/alerts/{args.alert}/{action}", json={"note": args.note})
    return str(answer["detail"])
