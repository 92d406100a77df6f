"""``corral ssh JOB [--task ROLE-INDEX] [-- [SSH OPTIONS] [COMMAND...]]``.

    corral ssh job-01m8...                               # a shell in the first task
    corral ssh job-01m8... --task worker-1 -- nvidia-smi
    corral ssh job-01m8... -- -i ~/.ssh/work_key -L 6006:localhost:6006

Runs the system's ``ssh`` into the task's sshd, which a job with ``ssh`` runs in every
task (``shared/ssh_spec.py``). Nodes open no port to the user: ssh's ``ProxyCommand`` is
``corral ssh-proxy``, which carries the connection over the API's gateway as a
port-forward to the task's ``ssh`` port (``corral port-forward``'s session). The user's
own key authenticates (ssh's default keys, or ``-i``): it must be one the job lets in
(``ssh.authorized_keys``, or a key named in ``ssh.user_keys``).

The host key is checked: the job's host key, which every task's sshd presents, is read
first from the task itself over the API (an exec of ``cat .ssh/known_hosts``, in the
task's working directory), and pinned for this one connection; an sshd presenting any
other key is refused. The login name is the task's account: the job id where nodes give
each job a uid of its own (``CORRAL_AGENT_RUN_AS=dynamic``, the default), else your own
(``--login``).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from corral.commands.errors import Refused, UsageProblem
from corral.commands.port_forward import copy_both_ways
from corral.commands.session import Options, client, interactive
from corral.commands.targets import check_label, check_running, target
from corral.sdk import ApiError, ConnectionFailed

# The port label every task of a job with ssh has (the platform's, shared/ssh_spec.py).
SSH_PORT_LABEL = "ssh"
# ssh's options that take an argument (OpenSSH's getopt string): the one after such an
# option belongs to it, not to the command.
_WITH_ARGUMENT = frozenset("BbcDEeFIiJLlmOopQRSWw")


def split_ssh_args(args: list[str]) -> tuple[list[str], list[str]]:
    """``[SSH OPTIONS] [COMMAND...]``: the leading options (with their arguments), and the
    command the remote shell runs."""
    options: list[str] = []
    rest = list(args)
    while rest and rest[0].startswith("-") and rest[0] != "-":
        option = rest.pop(0)
        if option == "--":
            break
        options.append(option)
        if option[-1] in _WITH_ARGUMENT and len(option) == 2:
            if not rest:
                raise UsageProblem(f"ssh option {option} needs an argument")
            options.append(rest.pop(0))
    return options, rest


def proxy_command(job_id: str, task: str) -> str:
    """The ``ProxyCommand`` ssh runs (through ``sh -c``): this Corral, as a module."""
    argv = [sys.executable, "-m", "corral", "ssh-proxy", job_id, "--task", task]
    return " ".join(shlex.quote(part) for part in argv).replace("%", "%%")


async def _host_key_line(ctx: typer.Context, job_id: str, task: str) -> str:
    """The job's pinned host key line, as the task holds it."""
    async with interactive(ctx) as api:
        done = await api.run(job_id, ["cat", ".ssh/known_hosts"], task=task)
    line = done.stdout.decode(errors="replace").strip()
    if done.exit_code != 0 or not line.startswith(f"corral-{job_id} "):
        said = (done.stderr.decode(errors="replace").strip() or done.reason)[:300]
        raise Refused(
            f"could not read the job's host key from task {task} of job {job_id} ({said or 'no key there'}); "
            "the job may not have ssh (submit it with `ssh: {}`), or its task is still starting"
        )
    return line.splitlines()[0]


def ssh_argv(job_id: str, task: str, login: str, known_hosts: Path, ssh_args: list[str]) -> list[str]:
    options, command = split_ssh_args(ssh_args)
    ssh = shutil.which("ssh")
    if ssh is None:
        raise UsageProblem("no ssh here: install OpenSSH's client (openssh-client)")
    # The user's options come first: for ssh the first value given for a setting wins.
    return [
        ssh,
        *options,
        "-l",
        login,
        "-o",
        f"ProxyCommand={proxy_command(job_id, task)}",
        "-o",
        f"HostKeyAlias=corral-{job_id}",
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "UpdateHostKeys=no",
        f"{task}.{job_id}",
        *command,
    ]


async def relay(ctx: typer.Context, job_id: str, task: str) -> int:
    """Standard input to the task's ssh port and what it answers to standard output,
    until either side ends (ssh's ``ProxyCommand``)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(0, "rb", 0))
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(1, "wb", 0)
    )
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    async with interactive(ctx) as api:
        try:
            stream = await api.port_forward(job_id, SSH_PORT_LABEL, task=task)
        except (ApiError, ConnectionFailed) as refused:
            typer.echo(f"corral ssh: {refused}", err=True)
            return 1
        try:
            await copy_both_ways(stream, reader, writer)
        finally:
            await stream.close()
            writer.close()
    return 0


def register(app: typer.Typer) -> None:
    @app.command("ssh")
    def ssh(
        ctx: typer.Context,
        job_id: Annotated[str, typer.Argument(metavar="JOB")],
        ssh_args: Annotated[
            list[str] | None,
            typer.Argument(
                metavar="[-- SSH OPTIONS] [COMMAND...]", help="after --: ssh's options, then a command"
            ),
        ] = None,
        task: Annotated[
            str | None, typer.Option("--task", help="<role>-<index>, e.g. worker-1 (default: the first)")
        ] = None,
        login: Annotated[
            str | None,
            typer.Option(
                "--login", help="the task's account (default: the job id; your own with account uids)"
            ),
        ] = None,
    ) -> None:
        """Log in to a running task of a job with `ssh`, with your own key, over the API."""
        with client(ctx) as api:
            job = api.get_job(job_id)
        chosen = target(job, task)
        if SSH_PORT_LABEL not in chosen.labels:
            raise Refused(f"job {job_id} runs no sshd: submit it with `ssh` in its spec (e.g. `ssh: {{}}`)")
        check_label(job, chosen, SSH_PORT_LABEL)
        check_running(job)
        options = ctx.find_object(Options) or Options()
        env = dict(os.environ)
        # The proxy is another process, started by ssh: it gets the API and token this
        # command was given through its environment (not its command line, which any
        # user of the machine can read).
        if options.url:
            env["CORRAL_URL"] = options.url
        if options.token:
            env["CORRAL_TOKEN"] = options.token
        line = asyncio.run(_host_key_line(ctx, job_id, chosen.name))
        with tempfile.TemporaryDirectory(prefix="corral-ssh-") as scratch:
            known_hosts = Path(scratch) / "known_hosts"
            known_hosts.write_text(line + "\n")
            argv = ssh_argv(job_id, chosen.name, login or job_id, known_hosts, list(ssh_args or []))
            done = subprocess.run(argv, env=env, check=False)  # the user's own ssh, in the foreground
        raise typer.Exit(done.returncode)

    @app.command("ssh-proxy", hidden=True)
    def ssh_proxy(
        ctx: typer.Context,
        job_id: Annotated[str, typer.Argument(metavar="JOB")],
        task: Annotated[str, typer.Option("--task", help="<role>-<index>")],
    ) -> None:
        """Relay standard input and output to a task's ssh port (ssh's ProxyCommand)."""
        raise typer.Exit(asyncio.run(relay(ctx, job_id, task)))
