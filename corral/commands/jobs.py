"""``corral submit FILE [--wait | --dry-run]``, ``jobs``, ``show``, ``logs [-f]``, ``cancel``,
``why``.

``submit --wait`` follows the job until it ends (``progress.py``) and exits 0 only if
it SUCCEEDED, 1 if it FAILED or was CANCELLED, so a script can chain on it.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from corral.commands import errors
from corral.commands.output import JsonFlag, echo, echo_json, echo_result, echo_table, when
from corral.commands.progress import follow
from corral.commands.session import client
from corral.sdk import ApiError, Client, load_job_spec
from corral.sdk.models import DryRun, Job

JobArg = Annotated[str, typer.Argument(metavar="JOB")]


class JobState(StrEnum):
    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


def explain(job: Job, now: datetime | None = None) -> str:
    """``corral why``: for a pending job, the scheduler's reason, its place and its expected
    start; otherwise its state and last word.

    A job backing off before its next attempt (``not_before`` still ahead) is not
    considered by the scheduler until then, so that is its reason. Once the time has
    passed, ``not_before`` stays set (a preempted job gets "now") and says nothing about
    why the job waits: the scheduler's reason does."""
    head = f"job {job.id} ({job.name}) is {job.state}"
    if job.state != "PENDING":
        return f"{head}: {job.reason}" if job.reason else head
    if job.not_before and job.not_before > (now or datetime.now(UTC)):
        # The launcher's reason for a retry says so: "retrying: task main-0 exited with code 3".
        return f"{head}: {job.reason or 'retrying'}; next attempt not before {when(job.not_before)} UTC"
    pending = job.pending
    if pending is None:
        return f"{head}: the scheduler has not considered it yet"
    expected = (
        f"expected to start around {when(pending.estimated_start)} UTC"
        if pending.estimated_start
        else "no start estimate (the jobs it waits for set no max_runtime_s)"
    )
    return (
        f"{head}: {pending.reason}\n"
        f"  {pending.detail}\n"
        f"  position {pending.position} in the queue; this reason since {when(pending.since)} UTC\n"
        f"  {expected}"
    )


def job_rows(jobs: list[Job]) -> list[list[str]]:
    return [
        [j.id, j.name, j.user, j.virtual_cluster, j.state, f"{j.gpus:g}", when(j.created_at), j.reason]
        for j in jobs
    ]


JOB_HEADERS = ["JOB", "NAME", "USER", "VC", "STATE", "GPUS", "SUBMITTED (UTC)", "REASON"]


def attempt_rows(job: Job) -> list[list[str]]:
    return [
        [
            a.task,
            str(a.attempt_no),
            a.state,
            a.node_id,
            ",".join(map(str, a.gpu_indices)) or "-",
            "-" if a.exit_code is None else str(a.exit_code),
            a.classification or "-",
            a.reason,
        ]
        for a in job.attempts
    ]


ATTEMPT_HEADERS = ["TASK", "ATTEMPT", "STATE", "NODE", "GPUS", "EXIT", "CLASS", "REASON"]


def render_dry_run(answer: DryRun) -> str:
    if answer.placeable_now:
        lines = ["would start now" + (" on borrowed GPUs (reclaimable)" if answer.borrowed else "")]
        lines += [
            f"  {p.task_role}-{p.task_index} on {p.node_id} GPUs {p.gpu_indices}" for p in answer.placements
        ]
        if answer.would_preempt:
            lines.append(f"  preempting {', '.join(answer.would_preempt)}")
        return "\n".join(lines)
    start = (
        f"expected to start around {when(answer.estimated_start)} UTC"
        if answer.estimated_start
        else "no start estimate"
    )
    return f"would wait: {answer.reason}\n  {answer.detail}\n  position {answer.position}; {start}"


def finished_code(job: Job) -> int:
    return errors.OK if job.state == "SUCCEEDED" else errors.FAILED


def register(app: typer.Typer) -> None:
    @app.command("submit")
    def submit(
        ctx: typer.Context,
        file: Annotated[
            Path, typer.Argument(metavar="FILE", help="the job spec, JSON or YAML (- reads stdin)")
        ],
        wait: Annotated[bool, typer.Option("--wait", "-w", help="follow the job until it ends")] = False,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="where would it go now? (nothing is stored)")
        ] = False,
        poll_s: Annotated[float, typer.Option("--poll-s", min=0.05, help="how often --wait looks")] = 0.5,
        json_: JsonFlag = False,
    ) -> None:
        """Submit a job; with --wait, exit 0 only if it SUCCEEDED (1: FAILED or CANCELLED)."""
        spec = load_job_spec(file)
        if spec.get("kind") == "service" and not dry_run:
            # A service is not one job: its replicas are (corral service).
            with client(ctx) as api:
                created = api.create_service(spec)
            echo_result(created, f"service {created.name} created: {created.endpoint}", as_json=json_)
            return
        with client(ctx) as api:
            if dry_run:
                answer = api.dry_run(spec)
                echo_result(answer, render_dry_run(answer), as_json=json_)
                return
            job = api.submit(spec)
            for warning in job.warnings:
                typer.echo(f"warning: {warning}", err=True)
            if not wait:
                echo_result(job, f"{job.id} submitted ({job.state})", as_json=json_)
                return
            final = _wait(api, job, poll_s, json_)
        raise typer.Exit(finished_code(final))

    @app.command("jobs")
    def jobs(
        ctx: typer.Context,
        state: Annotated[JobState | None, typer.Option("--state", help="only jobs in this state")] = None,
        limit: Annotated[int, typer.Option("--limit", min=1, max=500)] = 100,
        json_: JsonFlag = False,
    ) -> None:
        """List jobs, newest first (yours; every job for admins)."""
        with client(ctx) as api:
            items = api.list_jobs(state.value if state else None, limit).items
        if json_:
            echo_json(items)
        else:
            echo_table(JOB_HEADERS, job_rows(items))

    @app.command("show")
    def show(ctx: typer.Context, job_id: JobArg, json_: JsonFlag = False) -> None:
        """One job with every attempt of every task."""
        with client(ctx) as api:
            job = api.get_job(job_id)
        if json_:
            echo_json(job)
            return
        echo(explain(job))
        echo(
            f"  user {job.user}, virtual cluster {job.virtual_cluster}, priority {job.priority},"
            f" {job.gpus:g} GPU{'' if job.gpus == 1 else 's'}"
        )
        echo(
            f"  submitted {when(job.created_at)} UTC"
            + (f", finished {when(job.finished_at)} UTC" if job.finished_at else "")
        )
        if job.attempts:
            echo_table(ATTEMPT_HEADERS, attempt_rows(job))

    @app.command("logs")
    def logs(
        ctx: typer.Context,
        job_id: JobArg,
        follow_: Annotated[
            bool, typer.Option("--follow", "-f", help="stream until the attempt ends")
        ] = False,
        task: Annotated[
            str | None, typer.Option("--task", help="<role>-<index>, e.g. main-0 (default: the first)")
        ] = None,
        attempt: Annotated[int | None, typer.Option("--attempt", min=1, help="default: the latest")] = None,
    ) -> None:
        """A task's output (stdout and stderr)."""
        with client(ctx) as api:
            if not follow_:
                sys.stdout.write(api.logs(job_id, task, attempt))
                return
            _wait_until_started(api, job_id, task, attempt)
            for chunk in api.follow_logs(job_id, task, attempt):
                sys.stdout.write(chunk)
                sys.stdout.flush()

    @app.command("cancel")
    def cancel(ctx: typer.Context, job_id: JobArg, json_: JsonFlag = False) -> None:
        """Cancel a job: at once if pending, else its tasks are stopped."""
        with client(ctx) as api:
            job = api.cancel(job_id)
        echo_result(job, f"{job.id}: cancel requested ({job.state})", as_json=json_)

    @app.command("why")
    def why(ctx: typer.Context, job_id: JobArg, json_: JsonFlag = False) -> None:
        """Why a job waits (or what became of it)."""
        with client(ctx) as api:
            job = api.get_job(job_id)
        if json_:
            echo_json(
                {
                    "id": job.id,
                    "state": job.state,
                    "reason": job.reason,
                    "pending": job.pending.model_dump(mode="json") if job.pending else None,
                }
            )
        else:
            echo(explain(job))


def _wait(api: Client, job: Job, poll_s: float, json_: bool) -> Job:
    try:
        final = follow(api, job, poll_s, quiet=json_)
    except KeyboardInterrupt:
        typer.echo(f"stopped waiting; {job.id} goes on (corral cancel {job.id} stops it)", err=True)
        raise typer.Exit(errors.INTERRUPTED) from None
    if json_:
        echo_json(final)
    return final


def _wait_until_started(api: Client, job_id: str, task: str | None, attempt: int | None) -> None:
    """``logs -f`` on a job that has not started yet waits for it rather than failing."""
    announced = False
    while True:
        try:
            api.logs(job_id, task, attempt)
            return
        except ApiError as error:
            job = api.get_job(job_id)  # a missing job raises its own 404
            if error.status != 404 or job.finished:
                raise
        if not announced:
            typer.echo(f"{job_id} is {job.state}; waiting for it to start...", err=True)
            announced = True
        time.sleep(1.0)
