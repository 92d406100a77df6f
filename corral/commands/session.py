"""The SDK client a command uses: built from the global ``--url``/``--token`` options
(else the environment, the config file, the local admin token: ``corral/sdk/config.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import typer

from corral.sdk import Client


@dataclass(frozen=True)
class Options:
    url: str | None = None
    token: str | None = None


def client(ctx: typer.Context) -> Client:
    options = ctx.find_object(Options) or Options()
    return Client(options.url, options.token)
