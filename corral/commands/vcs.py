"""``corral vcs``: virtual clusters, their quotas and usage; ``corral vc show|set|delete``.

corral vcs
corral vc set vision --quota H100=16 --quota A100=8 --max-gpus-per-user 8   (admin)
corral vc set vision --no-interactive        (no exec, port-forward or proxy into its jobs)
corral vc delete vision                                                     (admin)
"""

from __future__ import annotations

from typing import Annotated

import typer

from corral.commands.errors import UsageProblem
from corral.commands.output import JsonFlag, echo, echo_json, echo_table
from corral.commands.session import client
from corral.sdk.models import VirtualCluster

HEADERS = ["VC", "QUOTA", "GUARANTEED", "BORROWED", "PER USER", "RUNNING", "PENDING"]
NameArg = Annotated[str, typer.Argument(metavar="NAME")]


def parse_quota(items: list[str]) -> dict[str, int]:
    quota = {}
    for item in items:
        gpu_type, _, gpus = item.partition("=")
        if not gpu_type or not gpus.isdigit():
            raise UsageProblem(f"--quota {item!r}: give TYPE=GPUS, e.g. --quota H100=16")
        quota[gpu_type] = int(gpus)
    return quota


def _per_type(values: dict[str, int]) -> str:
    return " ".join(f"{t}:{v}" for t, v in sorted(values.items()) if v) or "-"


def rows(vcs: list[VirtualCluster]) -> list[list[str]]:
    return [
        [
            v.name,
            _per_type(v.quota),
            _per_type({t: u.guaranteed for t, u in v.usage.items()}),
            _per_type({t: u.borrowed for t, u in v.usage.items()}),
            str(v.max_gpus_per_user) if v.max_gpus_per_user is not None else "-",
            str(v.running_jobs),
            str(v.pending_jobs),
        ]
        for v in vcs
    ]


def register(app: typer.Typer) -> None:
    @app.command("vcs")
    def vcs(ctx: typer.Context, json_: JsonFlag = False) -> None:
        """List virtual clusters: quota, GPUs in use, jobs."""
        with client(ctx) as api:
            items = api.list_vcs()
        if json_:
            echo_json(items)
        else:
            echo_table(HEADERS, rows(items))

    vc = typer.Typer(help="Show, create, resize or delete a virtual cluster (admin).", no_args_is_help=True)
    app.add_typer(vc, name="vc")

    @vc.command("show")
    def show(ctx: typer.Context, name: NameArg, json_: JsonFlag = False) -> None:
        """One virtual cluster's quota and usage."""
        with client(ctx) as api:
            found = api.get_vc(name)
        if json_:
            echo_json(found)
        else:
            echo_table(HEADERS, rows([found]))

    @vc.command("set")
    def put(
        ctx: typer.Context,
        name: NameArg,
        quota: Annotated[
            list[str] | None,
            typer.Option("--quota", metavar="TYPE=GPUS", help="guaranteed GPUs of a type (repeat)"),
        ] = None,
        max_gpus_per_user: Annotated[int | None, typer.Option("--max-gpus-per-user", min=0)] = None,
        description: Annotated[str, typer.Option("--description")] = "",
        interactive: Annotated[
            bool | None,
            typer.Option(
                "--interactive/--no-interactive",
                help="may its jobs' owners exec into them and forward their ports (default: as it is)",
            ),
        ] = None,
        json_: JsonFlag = False,
    ) -> None:
        """Create a VC or replace its quota and limits."""
        wanted = parse_quota(quota or [])
        with client(ctx) as api:
            changed = api.put_vc(name, wanted, max_gpus_per_user, description, interactive)
        if json_:
            echo_json(changed)
            return
        echo_table(HEADERS, rows([changed]))
        for warning in changed.warnings:
            echo(f"warning: {warning}")

    @vc.command("delete")
    def delete(ctx: typer.Context, name: NameArg) -> None:
        """Delete a VC with no job waiting or running."""
        with client(ctx) as api:
            api.delete_vc(name)
        echo(f"virtual cluster {name} deleted")
