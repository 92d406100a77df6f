"""``corral services``: Corral's own service instances and when each was last heard."""

from __future__ import annotations

import argparse

from corral.commands.client import request
from corral.commands.nodes import table

COMMANDS = ("services",)


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    commands.add_parser("services", help="list Corral's service instances and when each was last heard")


def run(_: argparse.Namespace) -> str:
    rows = [
        [
            i["service"],
            i["instance_id"],
            str(i["pid"]),
            i["started_at"][:19].replace("T", " "),
            f"{i['silent_s']:.0f}s ago",
        ]
        for i in request("GET", "/api/v1/services")["items"]
    ]
    return table(["SERVICE", "INSTANCE", "PID", "STARTED (UTC)", "LAST HEARD"], rows)
