"""The ``corral`` command.

``corral up`` runs the whole stack on this machine (what ``make up`` calls);
``corral <service>`` runs one service in the foreground (``api``, ``scheduler``,
``launcher``, ``monitor``, ``alerter``, ``exporter``, ``agent``); ``corral nodes``,
``corral gpus``, ``corral drain NODE``, ``corral undrain NODE``, ``corral alerts``,
``corral ack ALERT``, ``corral resolve ALERT``, ``corral alert-rules``, ``corral why JOB``,
``corral services``, ``corral vcs``, ``corral vc set|delete``, ``corral webhooks`` and
``corral webhook create|delete|deliveries`` talk to the API
(``CORRAL_URL``, ``CORRAL_TOKEN`` or ``$CORRAL_HOME/admin-token``). The other user-facing
commands (submit, jobs, logs, ...) arrive with the SDK/CLI issue.
"""

from __future__ import annotations

import argparse
import runpy
import sys

from corral.commands import alerts, jobs, nodes, services, vcs, webhooks
from corral.commands.client import CommandError
from corral.local.supervisor import SERVICES, StackConfig, Supervisor

API_COMMANDS = (nodes, alerts, jobs, services, vcs, webhooks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="corral", description="Corral GPU training cluster")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("up", help="run Corral on this machine (private NATS + Postgres)")
    for name, _ in SERVICES:
        commands.add_parser(name, help=f"run the {name} service in the foreground")
    for group in API_COMMANDS:
        group.add_commands(commands)
    args = parser.parse_args(argv)
    if args.command == "up":
        return Supervisor(StackConfig.from_environment()).run()
    for group in API_COMMANDS:
        if args.command in group.COMMANDS:
            try:
                print(group.run(args))
            except CommandError as exc:
                print(f"corral {args.command}: {exc}", file=sys.stderr)
                return 1
            return 0
    module = dict(SERVICES)[args.command]
    sys.argv = [module]
    runpy.run_module(module, run_name="__main__")
    return 0
