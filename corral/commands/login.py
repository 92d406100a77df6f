"""``corral login``: check a URL and token against the API and keep them in the config
file (``corral/sdk/config.py``), so later commands need neither option nor variable."""

from __future__ import annotations

from typing import Annotated

import typer

from corral.commands.output import echo
from corral.commands.session import Options
from corral.sdk import Client, write_config


def register(app: typer.Typer) -> None:
    @app.command("login")
    def login(
        ctx: typer.Context,
        url: Annotated[str | None, typer.Option("--url", help="the API, e.g. https://corral.example")] = None,
        token: Annotated[
            str | None, typer.Option("--token", help="a bearer token (asked for, hidden, when not given)")
        ] = None,
    ) -> None:
        """Check a URL and token and keep them for later commands."""
        options = ctx.find_object(Options) or Options()
        url = url or options.url
        token = token or options.token
        if not token:
            token = str(typer.prompt("token", hide_input=True))
        with Client(url, token) as api:  # no --url: CORRAL_URL, the config file, or the local stack
            api.list_jobs(limit=1)  # any authenticated read: a bad token is a 401 here
            checked = api.url
        path = write_config(checked, token)
        echo(f"logged in to {checked}; saved in {path}")
