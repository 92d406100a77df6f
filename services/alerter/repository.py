"""All of the alerter's SQL."""

from __future__ import annotations

from pathlib import Path

from services.alerter.rules import AlertDraft
from shared.db.pool import Connection
from shared.db.queries import Queries
from shared.events import AlertFiring
from shared.events.types import AlertFiringData
from shared.ids import new_alert_id
from shared.outbox import append

SQL = Queries(Path(__file__).parent / "sql")
SOURCE = "corral/alerter"


async def open_alert(conn: Connection, draft: AlertDraft) -> str | None:
    alert_id = await conn.fetchval(
        SQL.open_alert,
        new_alert_id(),
        draft.rule,
        draft.fingerprint,
        draft.severity,
        draft.summary,
        draft.labels,
    )
    if alert_id is None:
        return None
    event = AlertFiring(
        source=SOURCE,
        subject=alert_id,
        data=AlertFiringData(
            alert_id=alert_id,
            rule=draft.rule,
            severity=draft.severity,
            summary=draft.summary,
            labels=draft.labels,
        ),
    )
    await append(conn, event, aggregate=alert_id)
    return str(alert_id)
