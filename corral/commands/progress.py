"""``corral submit --wait``: follow a job until it ends.

On a terminal, a live view redrawn in place (rich ``Live``): the job's state with a
spinner and the time since submission, why it waits while it is pending, and one row per
task attempt (node, GPUs, state, exit code). Anywhere else (a pipe, a CI log), one line
per change, so the log reads as a history rather than a stream of redraws. ``quiet``
(for ``--json``) prints nothing: the caller prints the final job.

It polls ``GET /api/v1/jobs/{id}`` (``Client.watch``): a job's state changes a few
times in its life, polling twice a second is cheap, and it needs nothing but the job's
own endpoint, which every token that may submit may read.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from rich.console import Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from corral.commands.output import console, duration, when
from corral.sdk import Client
from corral.sdk.models import Job

STATE_STYLE = {
    "PENDING": "yellow",
    "SCHEDULED": "cyan",
    "RUNNING": "blue",
    "SUCCEEDED": "green",
    "FAILED": "red",
    "CANCELLED": "magenta",
}


def view(job: Job) -> RenderableType:
    elapsed = duration(((job.finished_at or datetime.now(UTC)) - job.created_at).total_seconds())
    state = Text(job.state, style=f"bold {STATE_STYLE.get(job.state, '')}")
    head = Text.assemble(f"{job.id} ({job.name}) ", state, f"  {elapsed}")
    if job.reason and job.finished:
        head.append(f"  {job.reason}")
    parts: list[RenderableType] = [head if job.finished else Spinner("dots", text=head)]
    if job.state == "PENDING" and job.pending is not None:
        parts.append(
            Text(f"  waiting: {job.pending.reason} — {job.pending.detail} (position {job.pending.position})")
        )
    if job.attempts:
        grid = Table(box=None, pad_edge=False, header_style="bold")
        for header in ("TASK", "ATTEMPT", "STATE", "NODE", "GPUS", "EXIT"):
            grid.add_column(header)
        for a in job.attempts:
            grid.add_row(
                a.task,
                str(a.attempt_no),
                a.state,
                a.node_id,
                ",".join(map(str, a.gpu_indices)) or "-",
                "-" if a.exit_code is None else str(a.exit_code),
            )
        parts.append(grid)
    return Group(*parts)


def describe(job: Job) -> str:
    """One line of what the job is doing (the non-terminal view prints it on each change)."""
    text = f"{job.id} {job.state}"
    if job.retries and not job.finished:  # or each retry of a failing task reads the same
        text += f" (retry {job.retries})"
    if job.state == "PENDING" and job.pending is not None:
        text += f": {job.pending.reason} ({job.pending.detail})"
    elif job.state in ("SCHEDULED", "RUNNING"):
        live = [a for a in job.attempts if a.finished_at is None]
        text += "".join(f" {a.task}@{a.node_id}{a.gpu_indices}" for a in live)
    elif job.reason:
        text += f": {job.reason}"
    return text


def follow(api: Client, job: Job, poll_s: float, quiet: bool = False) -> Job:
    """Follow ``job`` until it ends; returns it finished."""
    if quiet:
        return api.wait(job.id, poll_s)
    out = console()
    if not out.is_terminal:
        said = ""
        for seen in api.watch(job.id, poll_s):
            if describe(seen) != said:  # a poll may see a change this line does not show
                said = describe(seen)
                print(f"{when(datetime.now(UTC))} {said}", flush=True, file=sys.stdout)
            job = seen
        return job
    with Live(view(job), console=out, refresh_per_second=8) as live:
        for seen in api.watch(job.id, poll_s):
            job = seen
            live.update(view(job))
        live.update(view(job))
    return job
