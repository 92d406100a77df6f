"""``corral why JOB``: why a job is where it is — for a pending job, the scheduler's
reason, its place in the queue and since when; otherwise its state and last word."""

from __future__ import annotations

import argparse
from typing import Any

from corral.commands.client import request

COMMANDS = ("why",)


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    why = commands.add_parser("why", help="why a job waits (or what became of it)")
    why.add_argument("job")


def explain(job: dict[str, Any]) -> str:
    state = job["state"]
    head = f"job {job['id']} ({job['name']}) is {state}"
    if state != "PENDING":
        return f"{head}: {job['reason']}" if job["reason"] else head
    if job["not_before"]:
        return f"{head}: retrying, not before {job['not_before'][:19].replace('T', ' ')} UTC"
    pending = job["pending"]
    if pending is None:
        return f"{head}: the scheduler has not considered it yet"
    since = pending["since"][:19].replace("T", " ")
    start = pending.get("estimated_start")
    expected = (
        f"expected to start around {start[:19].replace('T', ' ')} UTC"
        if start
        else "no start estimate (the jobs it waits for set no max_runtime_s)"
    )
    return (
        f"{head}: {pending['reason']}\n"
        f"  {pending['detail']}\n"
        f"  position {pending['position']} in the queue; this reason since {since} UTC\n"
        f"  {expected}"
    )


def run(args: argparse.Namespace) -> str:
    return explain(request("GET", f"/api/v1/jobs/{args.job}"))
