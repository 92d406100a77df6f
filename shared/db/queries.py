"""Named queries: plain SQL kept in ``.sql`` files, loaded once, looked up by name.

A file holds several queries, each introduced by a ``-- name: <query_name>`` line
(the convention of aiosql/yesql, without the dependency). Keeping SQL in files keeps it
reviewable as SQL, greppable, and out of f-strings.
"""

from __future__ import annotations

import re
from pathlib import Path

_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


class Queries:
    """All ``-- name:`` queries found in the ``.sql`` files of one directory."""

    def __init__(self, directory: Path) -> None:
        self._queries: dict[str, str] = {}
        for path in sorted(directory.glob("*.sql")):
            self._load(path)

    def _load(self, path: Path) -> None:
        text = path.read_text()
        matches = list(_NAME_LINE.finditer(text))
        for position, match in enumerate(matches):
            end = matches[position + 1].start() if position + 1 < len(matches) else len(text)
            name = match.group(1)
            if name in self._queries:
                raise ValueError(f"{path}: query {name!r} is defined twice")
            body = text[match.end() : end].strip()
            if not body:
                raise ValueError(f"{path}: query {name!r} is empty")
            self._queries[name] = body

    def __getattr__(self, name: str) -> str:
        try:
            return self._queries[name]
        except KeyError:
            raise AttributeError(f"no SQL query named {name!r}") from None

    def names(self) -> list[str]:
        return sorted(self._queries)
