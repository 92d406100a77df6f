"""``corral notebook start|list|stop`` and ``corral tensorboard JOB``: apps as jobs.

    corral notebook start --gpus 1 --idle-timeout 3600   # prints the notebook's URL
    corral notebook list                                 # your notebooks and TensorBoards
    corral notebook stop job-01m8...
    corral tensorboard job-01m8...                       # TensorBoard over that job's event files

Each submits a one-task job (``notebook_specs.py``), then, with ``--wait`` (the default),
follows it until its app answers through the API's proxy, and prints the URL on standard
output (alone, so that ``url=$(corral notebook start)`` works; progress goes to standard
error). The URL is the API's: a browser signed in to the portal reaches it, and the
proxy lets only the job's owner (or an admin) through. A job that ends before its app
answers (its program missing on the node, say) makes the command say why, with the last
lines the task wrote, and exit 1.

``list`` and ``stop`` are the job commands narrowed to these jobs: a notebook is a job
named ``notebook``, a TensorBoard one named ``tensorboard``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import typer

from corral.commands import errors
from corral.commands.notebook_specs import (
    DEFAULT_IDLE_TIMEOUT_S,
    JUPYTER,
    NOTEBOOK,
    TENSORBOARD,
    TOKEN_VARIABLE,
    new_token,
    notebook_spec,
    tensorboard_spec,
)
from corral.commands.output import JsonFlag, echo, echo_json, echo_table, when
from corral.commands.session import async_client, client, interactive
from corral.commands.targets import proxy_path
from corral.sdk import ApiError, AsyncClient
from corral.sdk.interactive import Interactive
from corral.sdk.models import Job

APP_JOBS = (NOTEBOOK, TENSORBOARD)
LIVE_STATES = ("PENDING", "SCHEDULED", "RUNNING")
# The proxy's answers while nothing listens on the task's port yet.
NOT_LISTENING = frozenset({502, 503, 504})
LOG_TAIL_LINES = 5

WaitFlag = Annotated[
    bool, typer.Option("--wait/--no-wait", help="wait until it answers, then print its URL (default)")
]
TimeoutOption = Annotated[
    float, typer.Option("--timeout", min=1, help="seconds --wait waits for it to answer once running")
]


def app_url(api_url: str, job: Job) -> str:
    """Where a person opens the app of a notebook or TensorBoard job."""
    if job.name == NOTEBOOK:
        token = _notebook_token(job)
        return f"{api_url}{proxy_path(job.id, f'{NOTEBOOK}-0', JUPYTER)}lab" + (
            f"?token={token}" if token else ""
        )
    return f"{api_url}{proxy_path(job.id, f'{TENSORBOARD}-0', TENSORBOARD)}"


def _notebook_token(job: Job) -> str:
    tasks = job.spec.get("tasks") or [{}]
    env = tasks[0].get("env") if isinstance(tasks[0], dict) else None
    return str(env.get(TOKEN_VARIABLE, "")) if isinstance(env, dict) else ""


async def wait_until_answering(ctx: typer.Context, job: Job, timeout_s: float) -> Job:
    """Follow ``job`` until its app answers through the proxy; ``Refused`` with the job's
    reason and its last log lines if it ends first, or after ``timeout_s`` running."""
    label = JUPYTER if job.name == NOTEBOOK else TENSORBOARD
    path = proxy_path(job.id, f"{job.name}-0", label)
    async with async_client(ctx) as api, interactive(ctx) as sessions:
        said = ""
        running_since: float | None = None
        while True:
            job = await api.get_job(job.id)
            news = f"{job.id} is {job.state}" + (f": {job.reason}" if job.reason else "")
            if news != said:
                typer.echo(news, err=True)
                said = news
            if job.finished:
                raise errors.Refused(await _why_it_ended(api, job))
            if job.state == "RUNNING":
                running_since = running_since or time.monotonic()
                if await _answers(sessions, path):
                    return job
                if time.monotonic() - running_since > timeout_s:
                    raise errors.Refused(
                        f"{job.id} runs but its app did not answer within {timeout_s:.0f}s;"
                        f" see corral logs {job.id}"
                    )
            await asyncio.sleep(0.5)


async def _answers(sessions: Interactive, path: str) -> bool:
    return await sessions.probe(path) not in NOT_LISTENING


async def _why_it_ended(api: AsyncClient, job: Job) -> str:
    try:
        tail = (await api.logs(job.id)).rstrip("\n").splitlines()[-LOG_TAIL_LINES:]
    except ApiError:
        tail = []
    said = f"{job.id} ended {job.state}" + (f": {job.reason}" if job.reason else "")
    return "\n".join([said, *(f"  {line}" for line in tail)])


def _submitted(ctx: typer.Context, job: Job, *, wait: bool, timeout_s: float, what: str) -> None:
    if wait:
        job = asyncio.run(wait_until_answering(ctx, job, timeout_s))
    with client(ctx) as api:
        url = app_url(api.url, job)
    typer.echo(
        f"{what} {job.id} is {job.state}; open this in a browser signed in to Corral's portal"
        f" (corral notebook stop {job.id} ends it):",
        err=True,
    )
    echo(url)


def register(app: typer.Typer) -> None:
    notebook = typer.Typer(help="JupyterLab as a job, reached through the API.", no_args_is_help=True)
    app.add_typer(notebook, name="notebook")

    @notebook.command("start")
    def start(
        ctx: typer.Context,
        gpus: Annotated[
            float,
            typer.Option(
                "--gpus", min=0, help="GPUs for the notebook's kernels: whole ones, or a share of one (0.5)"
            ),
        ] = 0,
        vc: Annotated[str | None, typer.Option("--vc", help="virtual cluster (default: default)")] = None,
        idle_timeout: Annotated[
            int,
            typer.Option(
                "--idle-timeout",
                min=0,
                help="seconds idle before it stops itself, freeing its GPUs (0: never)",
            ),
        ] = DEFAULT_IDLE_TIMEOUT_S,
        memory_mb: Annotated[int | None, typer.Option("--memory-mb", min=1, help="memory for it")] = None,
        wait: WaitFlag = True,
        timeout: TimeoutOption = 120.0,
    ) -> None:
        """Start JupyterLab as a job and print its URL."""
        spec = notebook_spec(
            gpus=int(gpus) if gpus.is_integer() else gpus,
            virtual_cluster=vc,
            idle_timeout_s=idle_timeout,
            token=new_token(),
            memory_mb=memory_mb,
        )
        with client(ctx) as api:
            job = api.submit(spec)
        _submitted(ctx, job, wait=wait, timeout_s=timeout, what="notebook")

    @notebook.command("list")
    def list_(ctx: typer.Context, json_: JsonFlag = False) -> None:
        """Your notebooks and TensorBoards that have not ended, with their URLs."""
        with client(ctx) as api:
            jobs = [j for state in LIVE_STATES for j in api.iter_jobs(state) if j.name in APP_JOBS]
            if json_:
                echo_json(jobs)
                return
            rows = [
                [j.id, j.name, j.state, f"{j.gpus:g}", when(j.created_at), app_url(api.url, j)] for j in jobs
            ]
        echo_table(["JOB", "APP", "STATE", "GPUS", "SUBMITTED (UTC)", "URL"], rows)

    @notebook.command("stop")
    def stop(ctx: typer.Context, job_id: Annotated[str, typer.Argument(metavar="JOB")]) -> None:
        """Stop a notebook or TensorBoard (corral cancel stops any job)."""
        with client(ctx) as api:
            job = api.get_job(job_id)
            if job.name not in APP_JOBS:
                raise errors.Refused(
                    f"{job_id} is not a notebook or TensorBoard (it is named {job.name!r});"
                    f" corral cancel {job_id} stops any job"
                )
            job = api.cancel(job_id)
        echo(f"{job.id}: stop requested ({job.state})")

    @app.command("tensorboard")
    def tensorboard(
        ctx: typer.Context,
        job_id: Annotated[str, typer.Argument(metavar="JOB", help="the job whose event files to show")],
        vc: Annotated[str | None, typer.Option("--vc", help="virtual cluster (default: default)")] = None,
        wait: WaitFlag = True,
        timeout: TimeoutOption = 120.0,
    ) -> None:
        """Start TensorBoard over a job's event files (*tfevents*) and print its URL."""
        with client(ctx) as api:
            job = api.submit(tensorboard_spec(job_id, virtual_cluster=vc))
        _submitted(ctx, job, wait=wait, timeout_s=timeout, what="tensorboard")
