"""The SDK client a command uses: built from the global ``--url``/``--token`` options
(else the environment, the config file, the local admin token: ``corral/sdk/config.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import typer

from corral.sdk import AsyncClient, Client
from corral.sdk.interactive import Interactive


@dataclass(frozen=True)
class Options:
    url: str | None = None
    token: str | None = None


def client(ctx: typer.Context) -> Client:
    options = ctx.find_object(Options) or Options()
    return Client(options.url, options.token)


def interactive(ctx: typer.Context) -> Interactive:
    """Sessions into running tasks (exec, port-forward); built inside the event loop that uses it."""
    options = ctx.find_object(Options) or Options()
    return Interactive(options.url, options.token)


def async_client(ctx: typer.Context) -> AsyncClient:
    """The asyncio SDK client, for a command that waits on several things at once."""
    options = ctx.find_object(Options) or Options()
    return AsyncClient(options.url, options.token)
