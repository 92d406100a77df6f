"""``corral exec JOB [--task worker-1] [-T] [-- CMD ...]``: a command inside a running task.

    corral exec job-01m8...                       # a shell in the first task, on a terminal
    corral exec job-01m8... --task worker-1 -- nvidia-smi
    echo hi | corral exec job-01m8... -T -- cat   # pipes: no terminal, stdin passed through

The command joins the task as one of its own processes (its user, environment, working
directory and limits: the node does that). With a terminal (the default when standard
input is one; ``-t`` forces it, ``-T`` refuses it) the remote side gets a PTY of this
terminal's size, this terminal is put in raw mode, and every window change is sent as a
resize. Without one, standard output and standard error stay apart and the end of
standard input is passed on, so the command reads end-of-file as it would locally
(standard input from ``/dev/null``, or ``--no-stdin``, passes none at all).

The remote command's exit code is this command's exit code, as with ``ssh``. When the
session ends without one (the task ended, the API went away), the reason goes to
standard error and the exit code is 1 (``errors.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from typing import Annotated

import typer

from corral.commands import errors
from corral.commands.session import interactive
from corral.commands.terminal import InputReader, is_null_device, raw_mode, window_size, write_all
from corral.sdk.channels import Channel, status_message
from corral.sdk.interactive import SessionStream

STDIN, STDOUT, STDERR = 0, 1, 2


async def relay(stream: SessionStream, *, stdin: bool, tty: bool) -> None:
    """Copy this end's input to the session and the session's output here, until the
    session ends; with a terminal, also its window changes."""
    loop = asyncio.get_running_loop()
    resized = asyncio.Event()
    if tty:
        loop.add_signal_handler(signal.SIGWINCH, resized.set)
    try:
        async with asyncio.TaskGroup() as group:
            output = group.create_task(_print_output(stream))
            helpers = []
            if stdin:
                helpers.append(group.create_task(_send_input(stream, tty=tty)))
            if tty:
                helpers.append(group.create_task(_send_resizes(stream, resized)))
            await output
            for helper in helpers:  # the session ended: nothing more to send
                helper.cancel()
    finally:
        if tty:
            loop.remove_signal_handler(signal.SIGWINCH)


async def _print_output(stream: SessionStream) -> None:
    while (received := await stream.receive()) is not None:
        channel, data = received
        try:
            if channel == Channel.STDOUT:
                write_all(STDOUT, data)
            elif channel == Channel.STDERR:
                write_all(STDERR, data)
        except BrokenPipeError:  # our reader left (`| head`): the command's output has nowhere to go
            await stream.close()
            return


async def _send_input(stream: SessionStream, *, tty: bool) -> None:
    reader = InputReader(STDIN)
    try:
        while chunk := await reader.read():
            await stream.write_stdin(chunk)
    except OSError:  # unreadable standard input ends like an empty one
        pass
    if not tty:  # on a terminal, Ctrl-D is a key the remote terminal reads, not an end
        await stream.close_stdin()


async def _send_resizes(stream: SessionStream, resized: asyncio.Event) -> None:
    while True:
        await resized.wait()
        resized.clear()
        await stream.resize(*window_size(STDIN))


def outcome(stream: SessionStream) -> int:
    """The exit code for the session that ended: the remote command's own, else 1 with
    the reason said on standard error."""
    code = stream.exit_code
    if code is not None:
        return code
    if stream.status is not None:  # a status without an exit code: the command never ran
        reason = status_message(stream.status) or "the command did not run"
    else:
        reason = stream.close_reason or "the session ended before the command did"
    typer.echo(f"corral exec: {reason}", err=True)
    return errors.FAILED


async def run_exec(
    ctx: typer.Context, job_id: str, command: list[str], *, task: str | None, tty: bool, stdin: bool
) -> int:
    cols, rows = window_size(STDIN) if tty else (80, 24)
    async with interactive(ctx) as api:
        stream = await api.exec(job_id, command, task=task, tty=tty, stdin=stdin, cols=cols, rows=rows)
        try:
            with raw_mode(STDIN) if tty else contextlib.nullcontext():
                await relay(stream, stdin=stdin, tty=tty)
        finally:
            await stream.close()
    return outcome(stream)


def register(app: typer.Typer) -> None:
    @app.command("exec")
    def exec_(
        ctx: typer.Context,
        job_id: Annotated[str, typer.Argument(metavar="JOB")],
        command: Annotated[
            list[str] | None,
            typer.Argument(metavar="CMD", help="what to run (default: a shell, bash if the task has it)"),
        ] = None,
        task: Annotated[
            str | None, typer.Option("--task", help="<role>-<index>, e.g. worker-1 (default: the first)")
        ] = None,
        tty: Annotated[
            bool | None,
            typer.Option("--tty/--no-tty", "-t/-T", help="a terminal (default: when standard input is one)"),
        ] = None,
        stdin: Annotated[
            bool, typer.Option("--stdin/--no-stdin", help="pass standard input on (default: yes)")
        ] = True,
    ) -> None:
        """Run a command in a running task (exit code: the command's)."""
        use_tty = sys.stdin.isatty() if tty is None else tty
        if use_tty and not sys.stdin.isatty():
            raise errors.UsageProblem("--tty needs standard input to be a terminal; use -T for pipes")
        stdin = stdin and not is_null_device(STDIN)
        code = asyncio.run(run_exec(ctx, job_id, command or [], task=task, tty=use_tty, stdin=stdin))
        raise typer.Exit(code)
