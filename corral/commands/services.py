"""``corral service create|list|show|scale|update|delete``: services, kept running behind
``/serve/NAME/``. ``corral submit`` of a ``kind: service`` spec creates the service too.

corral service create -f serve.yaml          (kind: service; replicas start in a moment)
corral service show mnist                    (state, why, and each replica)
corral service scale mnist 3
corral service update mnist --model mnist@2  (a rolling update to that model version)
corral service update mnist -f serve.yaml    (a new spec: the next revision)
corral service delete mnist                  (drained, then stopped)
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from corral.commands.errors import UsageProblem
from corral.commands.output import JsonFlag, echo, echo_json, echo_result, echo_table, when
from corral.commands.session import client
from corral.sdk.models.serving import Service
from corral.sdk.specs import load_job_spec

SERVICE_HEADERS = ["SERVICE", "OWNER", "STATE", "READY", "REVISION", "REQ/S", "ENDPOINT", "UPDATED (UTC)"]
REPLICA_HEADERS = ["JOB", "REVISION", "STATE", "READY", "RESTARTS", "NODE", "REASON"]

SpecFile = Annotated[
    Path | None, typer.Option("--file", "-f", metavar="FILE", help="the spec, JSON or YAML (- reads stdin)")
]


def rate(service: Service) -> str:
    return "-" if service.requests_per_s is None else f"{service.requests_per_s:.1f}"


def service_rows(services: list[Service]) -> list[list[str]]:
    return [
        [
            s.name,
            s.owner,
            s.state,
            f"{s.ready}/{s.replicas}",
            str(s.revision),
            rate(s),
            s.endpoint,
            when(s.updated_at),
        ]
        for s in services
    ]


def status_text(service: Service) -> str:
    """The state and why, then each replica: what ``corral service show`` prints."""
    public = ", public" if service.public else ""
    lines = [
        f"{service.name}: {service.state} ({service.ready}/{service.replicas} ready, revision"
        f" {service.revision}{public}) at {service.endpoint}",
        f"  {service.reason}",
    ]
    if service.requests_per_s is not None:
        lines.append(f"  {service.requests_per_s:.1f} requests/s through this API over the last minute")
    return "\n".join(lines)


def replica_rows(service: Service) -> list[list[str]]:
    return [
        [
            r.job_id,
            str(r.revision),
            r.state,
            "yes" if r.ready else "no",
            str(r.restarts),
            r.node_id or "-",
            r.reason,
        ]
        for r in service.replica_list
    ]


def service_spec(file: Path | None, what: str) -> dict[str, Any]:
    if file is None:
        raise UsageProblem(f"{what} needs the spec: -f FILE (JSON or YAML, kind: service)")
    return load_job_spec(file)


def register(app: typer.Typer) -> None:
    service = typer.Typer(
        help="Create, show, scale, update and delete services (replicas behind /serve/NAME/).",
        no_args_is_help=True,
    )
    app.add_typer(service, name="service")

    @service.command("create")
    def create(ctx: typer.Context, file: SpecFile = None, json_: JsonFlag = False) -> None:
        """Create a service from a kind: service spec; its replicas start in a moment."""
        spec = service_spec(file, "corral service create")
        with client(ctx) as api:
            created = api.create_service(spec)
        echo_result(created, f"service {created.name} created: {created.endpoint}", as_json=json_)

    @service.command("list")
    def list_services(ctx: typer.Context, json_: JsonFlag = False) -> None:
        """Your services (every one, for admins)."""
        with client(ctx) as api:
            found = api.list_services()
        if json_:
            echo_json(found)
        else:
            echo_table(SERVICE_HEADERS, service_rows(found))

    @service.command("show")
    def show(
        ctx: typer.Context, name: Annotated[str, typer.Argument(metavar="NAME")], json_: JsonFlag = False
    ) -> None:
        """A service's state and why, and each replica: readiness, restarts, what it is doing."""
        with client(ctx) as api:
            found = api.get_service(name)
        if json_:
            echo_json(found)
            return
        echo(status_text(found))
        if found.replica_list:
            echo_table(REPLICA_HEADERS, replica_rows(found))

    @service.command("scale")
    def scale(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(metavar="NAME")],
        replicas: Annotated[int, typer.Argument(metavar="N", min=0, max=64)],
        json_: JsonFlag = False,
    ) -> None:
        """Keep N replicas running (0 stops them all; the service stays)."""
        with client(ctx) as api:
            scaled = api.scale_service(name, replicas)
        echo_result(scaled, f"service {name} scaled to {replicas} replicas ({scaled.state})", as_json=json_)

    @service.command("update")
    def update(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(metavar="NAME")],
        file: SpecFile = None,
        model: Annotated[
            str | None,
            typer.Option("--model", metavar="NAME@VERSION", help="serve this version of the model it reads"),
        ] = None,
        json_: JsonFlag = False,
    ) -> None:
        """A new revision, rolled out one replica at a time: a new spec (-f), or the current
        one with its model input at another version (--model mnist@2)."""
        if (file is None) == (model is None):
            raise UsageProblem("give one of -f FILE (a new spec) or --model NAME@VERSION")
        with client(ctx) as api:
            if model is not None:
                updated = api.update_service_model(name, model)
            else:
                updated = api.update_service(name, service_spec(file, "corral service update"))
        echo_result(
            updated,
            f"service {name} at revision {updated.revision}: rolling out ({updated.state})",
            as_json=json_,
        )

    @service.command("delete")
    def delete(
        ctx: typer.Context, name: Annotated[str, typer.Argument(metavar="NAME")], json_: JsonFlag = False
    ) -> None:
        """Delete the service: its replicas are drained, then stopped."""
        with client(ctx) as api:
            deleted = api.delete_service(name)
        echo_result(deleted, f"service {name} is being deleted: {deleted.reason}", as_json=json_)
