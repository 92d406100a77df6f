"""The ``corral`` command.

``corral up`` runs the whole stack on this machine (what ``make up`` calls);
``corral <service>`` runs one service in the foreground (``api``, ``scheduler``,
``launcher``, ``monitor``, ``alerter``, ``exporter``, ``agent``). The user-facing
commands (submit, jobs, logs, ...) arrive with the SDK/CLI issue.
"""

from __future__ import annotations

import argparse
import runpy
import sys

from corral.local.supervisor import SERVICES, StackConfig, Supervisor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="corral", description="Corral GPU training cluster")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("up", help="run Corral on this machine (private NATS + Postgres)")
    for name, _ in SERVICES:
        commands.add_parser(name, help=f"run the {name} service in the foreground")
    args = parser.parse_args(argv)
    if args.command == "up":
        return Supervisor(StackConfig.from_environment()).run()
    module = dict(SERVICES)[args.command]
    sys.argv = [module]
    runpy.run_module(module, run_name="__main__")
    return 0
