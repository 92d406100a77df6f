"""How commands print: tables and lines for people, JSON for scripts.

Tables are rich tables without borders, so a row is one line of whitespace-separated
cells that ``awk`` can still pick apart. When standard output is not a terminal the
table is never narrowed or wrapped to a guessed width (rich would assume 80 columns):
a pipe gets whole cells. Cells are ``Text``, never markup, so a ``[3]`` in a GPU name
or a job's reason is printed as written. ``--json`` prints the API's answer as JSON
(every field, including ones this client does not know yet).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table
from rich.text import Text

JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON for scripts instead of a table")]


def console() -> Console:
    """A console on the current standard output (tests and CliRunner swap it)."""
    terminal = sys.stdout.isatty()
    return Console(file=sys.stdout, highlight=False, width=None if terminal else 100_000)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    grid = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for header in headers:
        grid.add_column(header, no_wrap=not sys.stdout.isatty())
    for row in rows:
        grid.add_row(*(Text(cell) for cell in row))
    out = console()
    with out.capture() as captured:
        out.print(grid)
    return "\n".join(line.rstrip() for line in captured.get().rstrip("\n").splitlines())


def echo(text: str) -> None:
    typer.echo(text)


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    typer.echo(table(headers, rows))


def to_json(value: BaseModel | Sequence[BaseModel] | dict[str, Any]) -> str:
    if isinstance(value, BaseModel):
        data: Any = value.model_dump(mode="json")
    elif isinstance(value, dict):
        data = value
    else:
        data = [item.model_dump(mode="json") for item in value]
    return json.dumps(data, indent=2)


def echo_json(value: BaseModel | Sequence[BaseModel] | dict[str, Any]) -> None:
    typer.echo(to_json(value))


def echo_result(value: BaseModel | Sequence[BaseModel] | dict[str, Any], text: str, *, as_json: bool) -> None:
    """What a command answers: ``value`` as JSON for scripts (``--json``), else ``text``."""
    if as_json:
        echo_json(value)
    else:
        echo(text)


def when(stamp: datetime | None) -> str:
    """UTC, to the second: ``2026-11-22 14:08:24``."""
    return stamp.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if stamp else "-"


def age(stamp: datetime | None) -> str:
    if stamp is None:
        return "-"
    seconds = (datetime.now(UTC) - stamp).total_seconds()
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    return f"{seconds / 60:.0f}m ago" if seconds < 7200 else f"{seconds / 3600:.0f}h ago"


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
