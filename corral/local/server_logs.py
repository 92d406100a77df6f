"""Reading a private server's log when it will not start: the line that says why.

A server that refuses its data (a damaged Postgres data directory, a JetStream store
NATS cannot use) says why in its log and exits; ``make up`` repeats that line, names the
directory and says what to do, and never makes a fresh empty store in its place.
"""

from __future__ import annotations

import re
from pathlib import Path

POSTGRES_FATAL = re.compile(r"\b(FATAL|PANIC):\s+(.*)")
NATS_FATAL = re.compile(r"\[(FTL|ERR)\]\s+(.*)")


def log_since(log_file: Path | None, offset: int) -> str:
    """What the server wrote to its log since ``offset`` (this start's part of it)."""
    if log_file is None or not log_file.exists():
        return ""
    with log_file.open("rb") as handle:
        handle.seek(offset)
        return handle.read()[-20000:].decode(errors="replace")


def log_size(log_file: Path | None) -> int:
    return log_file.stat().st_size if log_file is not None and log_file.exists() else 0


def last_line_saying(said: str, pattern: re.Pattern[str]) -> str | None:
    """The last line matching ``pattern`` (a level, then the message), as "LEVEL: message"."""
    found = [m for m in (pattern.search(line) for line in said.splitlines()) if m]
    return f"{found[-1][1]}: {found[-1][2].strip()}" if found else None


def damaged_store_fix(store: Path, empty: str) -> str:
    """What to do about a store its server refuses: never done for the operator."""
    return (
        f"restore {store} from a backup; or, to start with an empty {empty}, move it aside "
        f"(mv {store} {store}.damaged) and start again"
    )
