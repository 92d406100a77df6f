"""Pooled connections go back without a reset (``shared/db/pool.py: keep_session``), so
no code may leave session state on one: no session ``SET``, no session advisory lock, no
``LISTEN`` and no cursor outside the two places that own theirs.

A reading of every query Corral sends, not a run: a session ``SET`` slipped into a
repository would otherwise leak into whichever request gets that connection next.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The scheduler leader's session lock is on a connection of its own (never pooled); the
# outbox relay LISTENs on a pooled one and UNLISTENs before it goes back, and holds a
# partition's session lock for one pass, given back by the pass's last statement or by
# closing the connection (tests/shared/test_outbox.py checks both ways out).
ALLOWED = {
    "services/scheduler/leader.py": {"session advisory lock"},
    # The service controller's lease, held like the scheduler leader's on its own connection.
    "services/api/serving/controller.py": {"session advisory lock"},
    "shared/outbox/relay.py": {"LISTEN", "session advisory lock"},
    # Hears the node agents' "attempt ended"; UNLISTENs before its connection goes back.
    "services/launcher/attempt_ends.py": {"LISTEN"},
}
IN_PYTHON = {
    # (SQL keywords are upper case in Corral's code: "set" in a sentence is not a query)
    "session SET": re.compile(r"""["']\s*SET\s+(?!LOCAL\b)"""),
    "set_config for the session": re.compile(r"set_config\([^)]*false\s*\)", re.IGNORECASE),
    "session advisory lock": re.compile(r"pg_(try_)?advisory_lock(_shared)?\("),
    "LISTEN": re.compile(r"""add_listener\(|["']\s*LISTEN\b"""),
    "cursor": re.compile(r"""\.cursor\(|["']\s*DECLARE\b"""),
}


def _sql_statements(path: Path) -> list[str]:
    """The named queries of a .sql file, comments dropped."""
    text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("--"))
    return [statement.strip() for statement in text.split(";") if statement.strip()]


def test_no_query_leaves_session_state_on_a_pooled_connection() -> None:
    found = []
    for path in sorted([*ROOT.glob("services/**/*.py"), *ROOT.glob("shared/**/*.py")]):
        relative = str(path.relative_to(ROOT))
        source = path.read_text()
        for what, pattern in IN_PYTHON.items():
            if pattern.search(source) and what not in ALLOWED.get(relative, set()):
                found.append(f"{relative}: {what}")
    for path in sorted(ROOT.glob("services/**/sql/*.sql")):
        for statement in _sql_statements(path):
            first = statement.split(None, 1)[0].upper()
            if first in {"SET", "LISTEN", "DECLARE"} or re.search(r"pg_(try_)?advisory_lock\(", statement):
                found.append(f"{path.relative_to(ROOT)}: {statement[:60]}")
    assert found == [], "session state on pooled connections (see shared/db/pool.py: keep_session)"


def test_the_reading_finds_what_it_looks_for() -> None:
    # The patterns themselves, on lines that must be caught and lines that must not.
    assert IN_PYTHON["session SET"].search('await conn.execute("SET statement_timeout = 0")')
    assert not IN_PYTHON["session SET"].search('await conn.execute("SET LOCAL lock_timeout = 1")')
    assert IN_PYTHON["session advisory lock"].search("SELECT pg_try_advisory_lock($1)")
    assert not IN_PYTHON["session advisory lock"].search("SELECT pg_try_advisory_xact_lock($1, $2)")
    assert IN_PYTHON["LISTEN"].search("await conn.add_listener(channel, callback)")
    assert [s.split(None, 1)[0] for s in _sql_statements(ROOT / "services/scheduler/sql/scheduler.sql")][
        :1
    ] == ["UPDATE"]
