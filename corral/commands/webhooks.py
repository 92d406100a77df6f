"""``corral webhooks``: your webhook subscriptions; ``corral webhook create|delete|deliveries|
rotate-secret|redeliver``.

corral webhooks
corral webhook create https://hooks.example.com/corral --type corral.job.failed.v1 --vc vision
corral webhook deliveries whk-...
corral webhook delete whk-...
"""

from __future__ import annotations

from typing import Annotated

import typer

from corral.commands.output import JsonFlag, echo, echo_json, echo_table, when
from corral.commands.session import client
from corral.sdk.models import Delivery, Webhook

IdArg = Annotated[str, typer.Argument(metavar="ID")]


def rows(hooks: list[Webhook]) -> list[list[str]]:
    return [
        [
            h.id,
            h.owner,
            "yes" if h.enabled else f"no ({h.disabled_reason})",
            ",".join(h.event_types),
            h.virtual_cluster or "-",
            h.url,
        ]
        for h in hooks
    ]


HEADERS = ["ID", "OWNER", "ENABLED", "TYPES", "VC", "URL"]


def delivery_rows(items: list[Delivery]) -> list[list[str]]:
    return [
        [
            str(d.id),
            d.event_type,
            d.state,
            " ".join(str(a.status or "-") for a in d.log) or "-",
            (d.last_error or "")[:60],
        ]
        for d in items
    ]


def register(app: typer.Typer) -> None:
    @app.command("webhooks")
    def webhooks(ctx: typer.Context, json_: JsonFlag = False) -> None:
        """List webhook subscriptions (yours; all for admins)."""
        with client(ctx) as api:
            items = api.list_webhooks()
        if json_:
            echo_json(items)
        else:
            echo_table(HEADERS, rows(items))

    webhook = typer.Typer(
        help="Create or delete a webhook, rotate its secret, or show its deliveries.", no_args_is_help=True
    )
    app.add_typer(webhook, name="webhook")

    @webhook.command("create")
    def create(
        ctx: typer.Context,
        url: Annotated[str, typer.Argument(metavar="URL")],
        types: Annotated[list[str], typer.Option("--type", help="event type or prefix (repeat)")],
        vc: Annotated[
            str | None, typer.Option("--vc", help="only events of this virtual cluster's jobs")
        ] = None,
        description: Annotated[str, typer.Option("--description")] = "",
        json_: JsonFlag = False,
    ) -> None:
        """Subscribe a URL to events (prints the signing secret once)."""
        with client(ctx) as api:
            hook = api.create_webhook(url, types, vc, description)
        if json_:
            echo_json(hook)
            return
        echo_table(HEADERS, rows([hook]))
        echo(f"signing secret (shown only now, keep it): {hook.secret}")

    @webhook.command("delete")
    def delete(ctx: typer.Context, webhook_id: IdArg) -> None:
        """Delete a webhook and its delivery log."""
        with client(ctx) as api:
            api.delete_webhook(webhook_id)
        echo(f"webhook {webhook_id} deleted")

    @webhook.command("deliveries")
    def deliveries(
        ctx: typer.Context,
        webhook_id: IdArg,
        state: Annotated[str | None, typer.Option("--state", help="pending, delivered or failed")] = None,
        json_: JsonFlag = False,
    ) -> None:
        """The delivery log of a webhook, newest first."""
        with client(ctx) as api:
            items = api.list_deliveries(webhook_id, state)
        if json_:
            echo_json(items)
        else:
            echo_table(["DELIVERY", "EVENT", "STATE", "ANSWERS", "LAST ERROR"], delivery_rows(items))

    @webhook.command("rotate-secret")
    def rotate(
        ctx: typer.Context,
        webhook_id: IdArg,
        overlap_s: Annotated[
            float | None, typer.Option("--overlap-s", help="how long the old secret keeps signing")
        ] = None,
        json_: JsonFlag = False,
    ) -> None:
        """A new signing secret; the old one signs beside it for a while."""
        with client(ctx) as api:
            rotated = api.rotate_webhook_secret(webhook_id, overlap_s)
        if json_:
            echo_json(rotated)
            return
        echo(f"new signing secret (shown only now, keep it): {rotated.secret}")
        echo(f"the previous secret also signs until {when(rotated.previous_secrets_until)} UTC")

    @webhook.command("redeliver")
    def redeliver(
        ctx: typer.Context, webhook_id: IdArg, delivery_id: Annotated[int, typer.Argument(metavar="DELIVERY")]
    ) -> None:
        """Send a delivery again now."""
        with client(ctx) as api:
            echo(api.redeliver(webhook_id, delivery_id).detail)
