"""``corral nodes``, ``corral gpus`` (a gpustat-like view), ``corral drain``/``undrain``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from corral.commands.client import request


def _age(stamp: str | None) -> str:
    if not stamp:
        return "-"
    seconds = (datetime.now(UTC) - datetime.fromisoformat(stamp)).total_seconds()
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}m ago"


def table(headers: Sequence[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def render_nodes(nodes: list[dict[str, Any]]) -> str:
    rows = [
        [
            n["id"],
            n["state"],
            ("DRAINED" + (" (evict)" if n["drain_evicts"] else "")) if n["drained"] else "-",
            f"{n['gpus_in_use']}/{n['gpu_count']}"
            + (f" (of {n['expected_gpus']})" if n["expected_gpus"] > n["gpu_count"] else ""),
            str(n["lost_gpus"]),
            "simulated" if n["simulated"] else "nvml",
            _age(n["last_heartbeat"]),
            n["drain_reason"] or "",
        ]
        for n in nodes
    ]
    return table(["NODE", "STATE", "DRAIN", "GPUS USED", "LOST", "SOURCE", "HEARD", "REASON"], rows)


def _value(value: object, unit: str, unsupported: bool) -> str:
    if value is None:
        return "n/a" if unsupported else "?"
    return f"{value:.0f}{unit}" if isinstance(value, float) else f"{value}{unit}"


def render_gpus(gpus: list[dict[str, Any]]) -> str:
    """One line per GPU, like gpustat: node [index] model | temp, util | memory | power | user."""
    lines = []
    for g in gpus:
        head = f"{g['node_id']} [{g['index']}] {g['model']}"
        if g["lost"]:
            lines.append(f"{head} | LOST (fell off the bus)")
            continue
        unsupported = set(g["unsupported"])
        memory = (
            f"{g['memory_used_mb']} / {g['memory_total_mb']} MB"
            if g["memory_used_mb"] is not None
            else "? MB"
        )
        flags = []
        if g["throttle_reasons"]:
            flags += [r for r in g["throttle_reasons"] if r != "GpuIdle"]
        if g["ecc_uncorrected_volatile"]:
            flags.append(f"ECC-DBE {g['ecc_uncorrected_volatile']}")
        if g["last_xid"] is not None:
            flags.append(f"Xid {g['last_xid']}")
        user = f"{g['job_id']} {g['task']}" if g["job_id"] else "idle"
        lines.append(
            f"{head} | {_value(g['temperature_c'], '°C', 'temperature_c' in unsupported)}, "
            f"{_value(g['utilization_pct'], ' %', 'utilization_pct' in unsupported)} | {memory} | "
            f"{_value(g['power_w'], ' W', 'power_w' in unsupported)} | {user}"
            + (f" | {', '.join(flags)}" if flags else "")
        )
    return "\n".join(lines)


COMMANDS = ("nodes", "gpus", "drain", "undrain")


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    nodes = commands.add_parser("nodes", help="list nodes: liveness, drain, GPUs in use")
    nodes.add_argument("--json", action="store_true", help="print the API's JSON")
    gpus = commands.add_parser("gpus", help="every GPU's readings and the job using it (gpustat-like)")
    gpus.add_argument("--node", help="only this node's GPUs")
    gpus.add_argument("--json", action="store_true", help="print the API's JSON")
    for verb, text in (
        ("drain", "stop placing work on a node (admin)"),
        ("undrain", "put a node back (admin)"),
    ):
        sub = commands.add_parser(verb, help=text)
        sub.add_argument("node")
        sub.add_argument("--reason", default="", help="why (shown beside the node)")


def run(args: argparse.Namespace) -> str:
    if args.command == "nodes":
        items = request("GET", "/api/v1/nodes")["items"]
        return json.dumps(items, indent=2) if args.json else render_nodes(items)
    if args.command == "gpus":
        params = {"node": args.node} if args.node else {}
        items = request("GET", "/api/v1/gpus", params=params)["items"]
        return json.dumps(items, indent=2) if args.json else render_gpus(items)
    answer = request("POST", f"/api/v1/nodes/{args.node}/{args.command}", json={"reason": args.reason})
    return str(answer["detail"])
