"""The alerts slice's SQL: alerts, their transitions, silences and the rules in force
(the alerter's tables, read for queries).

The alerter owns all of it (DESIGN.md §1): an acknowledge, a silence or a change to the
rules is an event in the outbox (``append_event``), which the alerter carries out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from shared.db.pool import Database
from shared.db.queries import Queries
from shared.events import Event
from shared.outbox import append

SQL = Queries(Path(__file__).parent / "sql")


@dataclass(frozen=True, slots=True)
class AlertRow:
    id: str
    rule: str
    severity: str
    state: str
    summary: str
    labels: dict[str, str]
    started_at: datetime
    updated_at: datetime
    acknowledged_by: str | None
    acknowledged_at: datetime | None
    resolved_by: str | None
    resolved_at: datetime | None


@dataclass(frozen=True, slots=True)
class TransitionRow:
    at: datetime
    from_state: str | None
    to_state: str
    actor: str
    note: str


@dataclass(frozen=True, slots=True)
class SilenceRow:
    id: str
    matchers: list[dict[str, Any]]
    starts_at: datetime
    ends_at: datetime
    created_by: str
    comment: str
    created_at: datetime
    expired_by: str | None
    status: str  # pending, active or expired, as of now


@dataclass(frozen=True, slots=True)
class RulesRow:
    rules: dict[str, Any] | None  # None until the alerter has started once
    overrides: dict[str, Any]
    overrides_version: int
    overrides_by: str | None
    overrides_at: datetime | None
    in_force_version: int | None  # the overrides version the alerter has applied
    file: str | None
    problem: str | None  # a refused file edit or override; what was in force stays


class AlertRepository:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def append_event(self, event: Event, aggregate: str) -> None:
        """A request for the alerter: an event in the outbox, alone in its transaction."""
        async with self.db.transaction() as conn:
            await append(conn, event, aggregate=aggregate)

    async def list_alerts(
        self, state: str | None, username: str | None, alert_id: str | None, limit: int
    ) -> list[AlertRow]:
        """Newest first; ``username``: only the alerts about that user's jobs."""
        rows = await self.db.fetch(SQL.list_alerts, state, username, alert_id, limit)
        return [AlertRow(**r) for r in rows]

    async def alert_transitions(self, alert_id: str) -> list[TransitionRow]:
        return [TransitionRow(**r) for r in await self.db.fetch(SQL.alert_transitions, alert_id)]

    async def list_silences(self, silence_id: str | None) -> list[SilenceRow]:
        return [SilenceRow(**r) for r in await self.db.fetch(SQL.list_silences, silence_id)]

    async def alert_rules(self) -> RulesRow:
        row = await self.db.fetchrow(SQL.alert_rules)
        assert row is not None  # one row, always
        return RulesRow(**row)
