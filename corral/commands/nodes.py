"""``corral nodes``, ``corral gpus`` (a gpustat-like view), ``corral drain``/``undrain``,
``corral instances``."""

from __future__ import annotations

from typing import Annotated

import typer

from corral.commands.output import JsonFlag, age, echo, echo_json, echo_result, echo_table, when
from corral.commands.session import client
from corral.sdk.models import Gpu, Node

ReasonOption = Annotated[str, typer.Option("--reason", help="why (shown beside the node)")]


def node_rows(nodes: list[Node]) -> list[list[str]]:
    return [
        [
            n.id,
            n.state,
            ("DRAINED" + (" (evict)" if n.drain_evicts else "")) if n.drained else "-",
            f"{n.gpus_in_use}/{n.gpu_count}"
            + (f" (of {n.expected_gpus})" if n.expected_gpus > n.gpu_count else ""),
            str(n.lost_gpus),
            "simulated" if n.simulated else "nvml",
            n.isolation + (" (cpus shared)" if n.cpu_sharing else ""),
            age(n.last_heartbeat),
            n.drain_reason or "",
        ]
        for n in nodes
    ]


NODE_HEADERS = ["NODE", "STATE", "DRAIN", "GPUS USED", "LOST", "SOURCE", "ISOLATION", "HEARD", "REASON"]


def _value(value: object, unit: str, unsupported: bool) -> str:
    if value is None:
        return "n/a" if unsupported else "?"
    return f"{value:.0f}{unit}" if isinstance(value, float) else f"{value}{unit}"


def gpu_line(g: Gpu) -> str:
    """node [index] model | temp, util | memory | power | user | flags — like gpustat."""
    head = f"{g.node_id} [{g.index}] {g.model}"
    if g.lost:
        return f"{head} | LOST (fell off the bus)"
    unsupported = set(g.unsupported)
    memory = f"{g.memory_used_mb} / {g.memory_total_mb} MB" if g.memory_used_mb is not None else "? MB"
    flags = [r for r in g.throttle_reasons or [] if r != "GpuIdle"]
    if g.ecc_uncorrected_volatile:
        flags.append(f"ECC-DBE {g.ecc_uncorrected_volatile}")
    if g.last_xid is not None:
        flags.append(f"Xid {g.last_xid}")
    user = f"{g.job_id} {g.task}" if g.job_id else "idle"
    return (
        f"{head} | {_value(g.temperature_c, '°C', 'temperature_c' in unsupported)}, "
        f"{_value(g.utilization_pct, ' %', 'utilization_pct' in unsupported)} | {memory} | "
        f"{_value(g.power_w, ' W', 'power_w' in unsupported)} | {user}"
        + (f" | {', '.join(flags)}" if flags else "")
    )


def register(app: typer.Typer) -> None:
    @app.command("nodes")
    def nodes(ctx: typer.Context, json_: JsonFlag = False) -> None:
        """List nodes: liveness, drain, GPUs in use."""
        with client(ctx) as api:
            items = api.list_nodes()
        if json_:
            echo_json(items)
        else:
            echo_table(NODE_HEADERS, node_rows(items))

    @app.command("node")
    def node(
        ctx: typer.Context, node_id: Annotated[str, typer.Argument(metavar="NODE")], json_: JsonFlag = False
    ) -> None:
        """One node, its GPUs and its recent health history."""
        with client(ctx) as api:
            detail = api.get_node(node_id)
        if json_:
            echo_json(detail)
            return
        echo_table(NODE_HEADERS, node_rows([detail.node]))
        echo(f"isolation: {detail.node.isolation}: {detail.node.isolation_detail or '-'}")
        if detail.node.cpu_sharing:
            echo(f"cpus: {detail.node.cpu_sharing}")
        for gpu in detail.gpus:
            echo(gpu_line(gpu))
        if detail.health_events:
            echo_table(
                ["AT (UTC)", "KIND", "GPU", "CONDITION", "ACTION", "BY", "DETAIL"],
                [
                    [
                        when(e.at),
                        e.kind,
                        "-" if e.gpu_index is None else str(e.gpu_index),
                        e.condition,
                        e.action,
                        e.actor,
                        e.detail,
                    ]
                    for e in detail.health_events
                ],
            )

    @app.command("gpus")
    def gpus(
        ctx: typer.Context,
        node: Annotated[str | None, typer.Option("--node", help="only this node's GPUs")] = None,
        json_: JsonFlag = False,
    ) -> None:
        """Every GPU's readings and the job using it (gpustat-like)."""
        with client(ctx) as api:
            items = api.list_gpus(node)
        echo_result(items, "\n".join(gpu_line(g) for g in items), as_json=json_)

    @app.command("drain")
    def drain(
        ctx: typer.Context,
        node_id: Annotated[str, typer.Argument(metavar="NODE")],
        reason: ReasonOption = "",
        json_: JsonFlag = False,
    ) -> None:
        """Stop placing work on a node (admin)."""
        with client(ctx) as api:
            answer = api.drain(node_id, reason)
        echo_result(answer, answer.detail, as_json=json_)

    @app.command("undrain")
    def undrain(
        ctx: typer.Context,
        node_id: Annotated[str, typer.Argument(metavar="NODE")],
        reason: ReasonOption = "",
        json_: JsonFlag = False,
    ) -> None:
        """Put a node back (admin)."""
        with client(ctx) as api:
            answer = api.undrain(node_id, reason)
        echo_result(answer, answer.detail, as_json=json_)

    @app.command("instances")
    def instances(ctx: typer.Context, json_: JsonFlag = False) -> None:
        """List Corral's service instances and when each was last heard; under make up,
        also what its supervisor keeps alive (Postgres and NATS too): state, restarts, last exit."""
        with client(ctx) as api:
            overview = api.services_overview()
        if json_:
            echo_json(overview)
            return
        echo_table(
            ["SERVICE", "INSTANCE", "PID", "STARTED (UTC)", "LAST HEARD"],
            [
                [i.service, i.instance_id, str(i.pid), when(i.started_at), f"{i.silent_s:.0f}s ago"]
                for i in overview.items
            ],
        )
        if overview.supervised:
            typer.echo("")
            echo_table(
                ["SUPERVISED", "KIND", "STATE", "PID", "RESTARTS", "LAST EXIT"],
                [
                    [
                        p.name,
                        p.kind,
                        p.state,
                        "-" if p.pid is None else str(p.pid),
                        str(p.restarts),
                        "-" if p.last_exit is None else f"{p.last_exit} at {when(p.last_exit_at)}",
                    ]
                    for p in overview.supervised
                ],
            )
