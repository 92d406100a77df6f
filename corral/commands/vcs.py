"""``corral vcs``: virtual clusters, their quotas and usage; ``corral vc set|delete`` (admin).

corral vcs
corral vc set vision --quota H100=16 --quota A100=8 --max-gpus-per-user 8
corral vc delete vision
"""

from __future__ import annotations

import argparse
from typing import Any

from corral.commands.client import CommandError, request
from corral.commands.nodes import table

COMMANDS = ("vcs", "vc")


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    commands.add_parser("vcs", help="list virtual clusters: quota, GPUs in use, jobs")
    vc = commands.add_parser("vc", help="create, resize or delete a virtual cluster (admin)")
    actions = vc.add_subparsers(dest="action", required=True)
    put = actions.add_parser("set", help="create a VC or replace its quota and limits")
    put.add_argument("name")
    put.add_argument(
        "--quota", action="append", default=[], metavar="TYPE=GPUS", help="guaranteed GPUs of a type (repeat)"
    )
    put.add_argument("--max-gpus-per-user", type=int, default=None)
    put.add_argument("--description", default="")
    delete = actions.add_parser("delete", help="delete a VC with no job waiting or running")
    delete.add_argument("name")


def _quota(items: list[str]) -> dict[str, int]:
    quota = {}
    for item in items:
        gpu_type, _, gpus = item.partition("=")
        if not gpu_type or not gpus.isdigit():
            raise CommandError(f"--quota {item!r}: give TYPE=GPUS, e.g. --quota H100=16")
        quota[gpu_type] = int(gpus)
    return quota


def render(vcs: list[dict[str, Any]]) -> str:
    def per_type(values: dict[str, Any], pick: str | None = None) -> str:
        shown = [
            f"{t}:{v[pick] if pick else v}" for t, v in sorted(values.items()) if (v[pick] if pick else v)
        ]
        return " ".join(shown) or "-"

    rows = [
        [
            v["name"],
            per_type(v["quota"]),
            per_type(v["usage"], "guaranteed"),
            per_type(v["usage"], "borrowed"),
            str(v["max_gpus_per_user"]) if v["max_gpus_per_user"] is not None else "-",
            str(v["running_jobs"]),
            str(v["pending_jobs"]),
        ]
        for v in vcs
    ]
    return table(["VC", "QUOTA", "GUARANTEED", "BORROWED", "PER USER", "RUNNING", "PENDING"], rows)


def run(args: argparse.Namespace) -> str:
    if args.command == "vcs":
        return render(request("GET", "/api/v1/virtual-clusters")["items"])
    if args.action == "delete":
        request("DELETE", f"/api/v1/virtual-clusters/{args.name}")
        return f"virtual cluster {args.name} deleted"
    body = {
        "quota": _quota(args.quota),
        "max_gpus_per_user": args.max_gpus_per_user,
        "description": args.description,
    }
    vc = request("PUT", f"/api/v1/virtual-clusters/{args.name}", json=body)
    lines = [render([vc])] + [f"warning: {w}" for w in vc["warnings"]]
    return "\n".join(lines)
