"""``corral webhooks``: your webhook subscriptions; ``corral webhook create|delete|deliveries``.

corral webhooks
corral webhook create https://hooks.example.com/corral --type corral.job.failed.v1 --vc vision
corral webhook deliveries whk-...
corral webhook delete whk-...
"""

from __future__ import annotations

import argparse
from typing import Any

from corral.commands.client import request
from corral.commands.nodes import table

COMMANDS = ("webhooks", "webhook")


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    commands.add_parser("webhooks", help="list webhook subscriptions (yours; all for admins)")
    webhook = commands.add_parser("webhook", help="create or delete a webhook, or show its deliveries")
    actions = webhook.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="subscribe a URL to events (prints the secret once)")
    create.add_argument("url")
    create.add_argument(
        "--type", action="append", required=True, dest="types", help="event type or prefix (repeat)"
    )
    create.add_argument("--vc", default=None, help="only events of this virtual cluster's jobs")
    create.add_argument("--description", default="")
    delete = actions.add_parser("delete", help="delete a webhook and its delivery log")
    delete.add_argument("id")
    deliveries = actions.add_parser("deliveries", help="the delivery log of a webhook")
    deliveries.add_argument("id")


def render(hooks: list[dict[str, Any]]) -> str:
    rows = [
        [
            h["id"],
            h["owner"],
            "yes" if h["enabled"] else f"no ({h['disabled_reason']})",
            ",".join(h["event_types"]),
            h["virtual_cluster"] or "-",
            h["url"],
        ]
        for h in hooks
    ]
    return table(["ID", "OWNER", "ENABLED", "TYPES", "VC", "URL"], rows)


def render_deliveries(items: list[dict[str, Any]]) -> str:
    rows = [
        [
            str(d["id"]),
            d["event_type"],
            d["state"],
            " ".join(str(a["status"] or "-") for a in d["log"]) or "-",
            (d["last_error"] or "")[:60],
        ]
        for d in items
    ]
    return table(["DELIVERY", "EVENT", "STATE", "ANSWERS", "LAST ERROR"], rows)


def run(args: argparse.Namespace) -> str:
    if args.command == "webhooks":
        return render(request("GET", "/api/v1/webhooks")["items"])
    if args.action == "delete":
        request("DELETE", f"/api/v1/webhooks/{args.id}")
        return f"webhook {args.id} deleted"
    if args.action == "deliveries":
        return render_deliveries(request("GET", f"/api/v1/webhooks/{args.id}/deliveries")["items"])
    body = {
        "url": args.url,
        "event_types": args.types,
        "virtual_cluster": args.vc,
        "description": args.description,
    }
    hook = request("POST", "/api/v1/webhooks", json=body)
    return "\n".join([render([hook]), f"signing secret (shown only now, keep it): {hook['secret']}"])
