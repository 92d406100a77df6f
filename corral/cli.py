"""The ``corral`` command.

``corral up`` runs the whole stack on this machine (what ``make up`` calls);
``corral <service>`` runs one service in the foreground (``api``, ``scheduler``,
``launcher``, ``monitor``, ``alerter``, ``exporter``, ``agent``). Every other command
talks to the API through the SDK (``corral.sdk``): ``login``, ``submit``, ``jobs``,
``show``, ``logs``, ``cancel``, ``why``, ``exec``, ``port-forward``, ``notebook``,
``tensorboard``, ``vcs``/``vc``, ``nodes``/``node``, ``gpus``,
``drain``/``undrain``, ``join-token``, ``join``, ``remove-node``, ``bus-credentials``,
``services``, ``alerts``, ``ack``/``resolve``,
``silences``/``silence``/``unsilence``, ``alert-rules``, ``webhooks``/``webhook``,
``events``, ``whoami``, ``tokens``/``token``, ``users``/``user``, ``groups``/``group``,
``model``, ``artifacts``.
``corral --help`` and ``corral COMMAND --help`` say more.

The commands are typer commands (``corral/commands/``). ``main`` runs them without
click's standalone mode so that it alone decides the exit code (``commands/errors.py``):
every SDK error becomes one line on standard error and a documented code, never a
traceback.
"""

from __future__ import annotations

import asyncio
import json
import runpy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from corral.commands import (
    alerts,
    events,
    exec,
    jobs,
    login,
    membership,
    models,
    nodes,
    notebooks,
    port_forward,
    services,
    ssh,
    tenants,
    vcs,
    webhooks,
)
from corral.commands.errors import INTERRUPTED, Refused, UsageProblem, exit_code, message
from corral.commands.session import Options
from corral.local.bus_users import chart_authorization
from corral.local.node_home import apply_node_env
from corral.local.problems import StartupProblem
from corral.local.stack_config import NODE_SERVICES, SERVICES, StackConfig
from corral.local.supervisor import Supervisor
from corral.sdk import CorralError
from shared.bus.nats import NatsBus
from shared.bus.streams import STREAMS
from shared.settings import NatsSettings

API_COMMANDS = (
    login,
    jobs,
    exec,
    port_forward,
    ssh,
    notebooks,
    vcs,
    nodes,
    membership,
    models,
    services,
    alerts,
    webhooks,
    events,
    tenants,
)


def _service(module: str) -> Callable[[], None]:
    def run() -> None:
        sys.argv = [module]
        runpy.run_module(module, run_name="__main__")

    return run


def build() -> typer.Typer:
    app = typer.Typer(
        name="corral",
        help="Corral GPU training cluster",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @app.callback()
    def options(
        ctx: typer.Context,
        url: Annotated[
            str | None, typer.Option("--url", help="the API (default: CORRAL_URL, corral login)")
        ] = None,
        token: Annotated[
            str | None, typer.Option("--token", help="bearer token (default: CORRAL_TOKEN)")
        ] = None,
    ) -> None:
        ctx.obj = Options(url, token)

    @app.command("up")
    def up() -> None:
        """Run Corral on this machine (private NATS + Postgres)."""
        try:
            apply_node_env()  # a node's home (corral join): its settings
            code = Supervisor(StackConfig.from_environment()).run()
        except StartupProblem as problem:  # the step, the cause and the fix; no traceback
            print(f"corral up: {problem}", file=sys.stderr)
            code = 1
        raise typer.Exit(code)

    @app.command("nats-authorization")
    def nats_authorization(
        passwords: Annotated[
            Path, typer.Option("--passwords", help="a directory of one password file per user")
        ],
    ) -> None:
        """Print values for NATS's chart admitting each service with its permissions (a
        Kubernetes cluster: deploy/README.md); missing passwords are made, 0600."""
        services = [name for name, _ in SERVICES if name not in NODE_SERVICES]
        print(json.dumps(chart_authorization(passwords, services), indent=1))

    @app.command("ensure-streams")
    def ensure_streams() -> None:
        """Make or update Corral's JetStream streams, as the bus identity the environment
        names (the admin: services may only look at them)."""

        async def ensure() -> None:
            bus = await NatsBus.connect(NatsSettings(), name="corral-ensure-streams")
            try:
                await bus.ensure_streams()
            finally:
                await bus.close()

        asyncio.run(ensure())
        print("streams ready: " + ", ".join(spec.name for spec in STREAMS))

    for name, module in SERVICES:
        app.command(name, help=f"Run the {name} service in the foreground.")(_service(module))
    for group in API_COMMANDS:
        group.register(app)
    return app


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = typer.main.get_command(build())
    try:
        result = command.main(args=args, prog_name="corral", standalone_mode=False)
    except typer.TyperException as exc:  # a wrong command line (click's UsageError: exit 2)
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            print(f"corral: {exc.format_message()}", file=sys.stderr)
        return exc.exit_code
    except typer.Abort:  # Ctrl-C
        return INTERRUPTED
    except (CorralError, UsageProblem, Refused) as exc:
        print(f"corral {_name(args)}: {message(exc)}", file=sys.stderr)
        return exit_code(exc)
    return result if isinstance(result, int) else 0


def _name(args: list[str]) -> str:
    """The command's name for error messages: the words before the first option or id."""
    words: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--url", "--token"):
            skip = True
        elif arg.startswith("-") or (words and words[0] not in ("vc", "webhook", "notebook")):
            break
        else:
            words.append(arg)
    return " ".join(words[:2]) or "corral"
