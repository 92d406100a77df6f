"""The reference pages name everything the code has: every event type in docs/events.md,
every table and view in docs/tables.md."""

from __future__ import annotations

import re
from typing import get_args

from shared.events import Event
from tests.config_reference import ROOT


def event_types() -> list[str]:
    union = get_args(Event)[0]
    return [member.model_fields["type"].default for member in get_args(union)]


def test_every_event_type_is_documented() -> None:
    page = (ROOT / "docs" / "events.md").read_text()
    types = event_types()
    assert "corral.alert.rules_requested.v1" in types  # the union is read, not an empty list
    # The stream table names them without the prefix and version: `job.submitted`.
    missing = [t for t in types if f"`{t.removeprefix('corral.').rsplit('.', 1)[0]}`" not in page]
    assert not missing, f"event types docs/events.md does not describe: {missing}"


def test_every_table_and_view_is_in_the_ownership_list() -> None:
    schema = (ROOT / "shared" / "db" / "schema.sql").read_text()
    relations = re.findall(r"^CREATE (?:UNLOGGED )?(?:TABLE|VIEW) ([a-z_]+\.[a-z_]+)", schema, re.MULTILINE)
    assert "launcher.agents" in relations
    page = (ROOT / "docs" / "tables.md").read_text()
    missing = [name for name in relations if f"`{name}`" not in page]
    assert not missing, f"tables and views docs/tables.md does not list (who writes them?): {missing}"
