"""``corral model register|list|show``: models and their versions; ``corral artifacts JOB``:
the outputs a job kept.

corral model register mnist --from job-01j…:model --group vision   (version 1: the model is made)
corral model show mnist          (its versions)
corral model show mnist@3        (one version and its lineage; mnist@latest: the newest)
corral artifacts job-01j…        (each output: files, bytes, sha256)
"""

from __future__ import annotations

from typing import Annotated

import typer

from corral.commands.errors import UsageProblem
from corral.commands.output import JsonFlag, echo, echo_json, echo_result, echo_table, when
from corral.commands.session import client
from corral.sdk.models.registry import Artifact, ModelVersion, ModelVersionDetail, RegisteredModel

VERSION_HEADERS = ["VERSION", "PARENT", "FILES", "SIZE", "SHA256", "FROM", "BY", "REGISTERED (UTC)"]
MODEL_HEADERS = ["MODEL", "OWNER", "GROUP", "LATEST", "UPDATED (UTC)", "DESCRIPTION"]
ARTIFACT_HEADERS = ["OUTPUT", "ARTIFACT", "FILES", "SIZE", "SHA256", "KEPT (UTC)"]


def size(n: int | None) -> str:
    """Bytes for people: ``512B``, ``1.5KiB``, ``3.2GiB``."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n}B" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    raise AssertionError("unreachable")


def short(sha256: str | None) -> str:
    return sha256[:12] if sha256 else "-"


def parse_ref(ref: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME@VERSION`` (a number, or ``latest``)."""
    name, _, version = ref.partition("@")
    if not name or (version and version != "latest" and not version.isdigit()):
        raise UsageProblem(f"{ref!r}: give NAME or NAME@VERSION, e.g. mnist@3 or mnist@latest")
    return name, version or None


def version_rows(versions: list[ModelVersion]) -> list[list[str]]:
    return [
        [
            str(v.version),
            str(v.parent_version) if v.parent_version is not None else "-",
            str(v.files) if v.files is not None else "-",
            size(v.size_bytes),
            short(v.sha256),
            f"{v.source_job}:{v.source_output}",
            v.registered_by,
            when(v.created_at),
        ]
        for v in versions
    ]


def model_rows(models: list[RegisteredModel]) -> list[list[str]]:
    return [
        [m.name, m.owner, m.group or "-", str(m.latest_version), when(m.updated_at), m.description]
        for m in models
    ]


def artifact_rows(artifacts: list[Artifact]) -> list[list[str]]:
    return [
        [a.output, a.id, str(a.files), size(a.size_bytes), short(a.sha256), when(a.created_at)]
        for a in artifacts
    ]


def lineage(version: ModelVersionDetail) -> str:
    """One version as people read it: what it holds, where it came from, what that read."""
    parent = f"{version.model}@{version.parent_version}" if version.parent_version else "-"
    lines = [
        f"{version.ref}  {version.description}".rstrip(),
        f"  artifact   {version.artifact_id}  {version.files} files, {size(version.size_bytes)}",
        f"  sha256     {version.sha256 or '-'}",
        f"  from       {version.source_job}:{version.source_output}",
        f"  parent     {parent}",
        f"  registered {when(version.created_at)} by {version.registered_by}",
    ]
    if version.source_inputs:
        lines.append("  trained on")
        lines.extend(f"    {i.ref}  ({i.artifact_id}, at {i.path})" for i in version.source_inputs)
    else:
        lines.append("  trained on nothing registered (no inputs)")
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    model = typer.Typer(help="Register, list and show models and their versions.", no_args_is_help=True)
    app.add_typer(model, name="model")

    @model.command("register")
    def register_version(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(metavar="NAME")],
        source: Annotated[
            str, typer.Option("--from", metavar="JOB:OUTPUT", help="an output of a succeeded job of yours")
        ],
        parent: Annotated[
            int | None,
            typer.Option("--parent", min=1, help="the version it came from (default: the one its job read)"),
        ] = None,
        group: Annotated[
            str | None, typer.Option("--group", help="first register: share it with a group of yours")
        ] = None,
        description: Annotated[str, typer.Option("--description")] = "",
        json_: JsonFlag = False,
    ) -> None:
        """Register a job's output as the model's next version (1, 2, …)."""
        with client(ctx) as api:
            version = api.register_model(name, source, parent=parent, description=description, group=group)
        echo_result(version, f"registered {version.ref}\n{lineage(version)}", as_json=json_)

    @model.command("list")
    def list_models(ctx: typer.Context, json_: JsonFlag = False) -> None:
        """The models you may read: yours and your groups'."""
        found: list[RegisteredModel] = []
        with client(ctx) as api:
            cursor: str | None = None
            while True:
                page = api.list_models(cursor=cursor)
                found.extend(page.items)
                if not page.next_cursor:
                    break
                cursor = page.next_cursor
        if json_:
            echo_json(found)
        else:
            echo_table(MODEL_HEADERS, model_rows(found))

    @model.command("show")
    def show(
        ctx: typer.Context,
        ref: Annotated[str, typer.Argument(metavar="NAME[@VERSION]")],
        json_: JsonFlag = False,
    ) -> None:
        """A model and its versions; or, with @VERSION, one version and its lineage."""
        name, version = parse_ref(ref)
        with client(ctx) as api:
            if version is not None:
                one = api.get_model_version(name, version)
                echo_result(one, lineage(one), as_json=json_)
                return
            found = api.get_model(name)
        if json_:
            echo_json(found)
            return
        shared = f", shared with group {found.group}" if found.group else ""
        echo(f"{found.name}: owned by {found.owner}{shared}. {found.description}".rstrip())
        echo_table(VERSION_HEADERS, version_rows(found.versions))

    @app.command("artifacts")
    def artifacts(
        ctx: typer.Context, job_id: Annotated[str, typer.Argument(metavar="JOB")], json_: JsonFlag = False
    ) -> None:
        """The outputs a job kept when it succeeded: files, size, sha256."""
        with client(ctx) as api:
            kept = api.job_artifacts(job_id)
        if json_:
            echo_json(kept)
        elif not kept:
            echo(f"job {job_id} kept no outputs (it keeps its declared outputs when it succeeds)")
        else:
            echo_table(ARTIFACT_HEADERS, artifact_rows(kept))
