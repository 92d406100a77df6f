"""An alert's life: ``firing → acknowledged → resolved``, one open alert per fingerprint.

Each change, in the caller's transaction, records its transition (who, when, note),
announces itself (``corral.alert.firing``, ``corral.alert.changed``) and queues its
notifications (``notifications.py``). A change that does not apply (an alert of that
fingerprint open already, one not firing acknowledged, one resolved twice) does nothing
and says so.
"""

from __future__ import annotations

from services.alerter import repository
from services.alerter.notifications import notify
from services.alerter.repository import ChangedAlert
from services.alerter.routing import Routing
from services.alerter.rules import AlertDraft
from shared.db.pool import Connection
from shared.events import AlertChanged, AlertFiring
from shared.events.alerts import AlertChangedData, AlertFiringData
from shared.ids import new_alert_id
from shared.outbox import append

SOURCE = "corral/alerter"


async def open_alert(conn: Connection, draft: AlertDraft, routing: Routing) -> str | None:
    """Open the drafted alert; its id, or None when one of its fingerprint is open."""
    alert_id = await repository.insert_alert(
        conn,
        new_alert_id(),
        draft.rule,
        draft.fingerprint,
        draft.severity,
        draft.summary,
        draft.labels,
        draft.annotations,
    )
    if alert_id is None:
        return None
    await repository.record_transition(conn, alert_id, None, "firing", "alerter", draft.summary)
    await notify(conn, alert_id, "firing", "alerter", routing)
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


async def _announce(conn: Connection, alert: ChangedAlert, state: str, by: str, note: str) -> None:
    event = AlertChanged(
        source=SOURCE,
        subject=alert.id,
        data=AlertChangedData(
            alert_id=alert.id,
            rule=alert.rule,
            fingerprint=alert.fingerprint,
            state=state,
            by=by,
            note=note,
        ),
    )
    await append(conn, event, aggregate=alert.id)


async def acknowledge(conn: Connection, alert_id: str, by: str, note: str, routing: Routing) -> bool:
    """ "I'm on it": only a firing alert; False if it was not firing (or does not exist)."""
    alert = await repository.acknowledge(conn, alert_id, by)
    if alert is None:
        return False
    await repository.record_transition(conn, alert_id, "firing", "acknowledged", by, note)
    await _announce(conn, alert, "acknowledged", by, note)
    await notify(conn, alert_id, "acknowledged", by, routing)
    return True


async def resolve(conn: Connection, alert_id: str, by: str, note: str, routing: Routing) -> bool:
    alert = await repository.resolve(conn, alert_id, by)
    if alert is None:
        return False
    await repository.record_transition(conn, alert_id, alert.previous_state, "resolved", by, note)
    await _announce(conn, alert, "resolved", by, note)
    await notify(conn, alert_id, "resolved", by, routing)
    return True


async def resolve_fingerprint(conn: Connection, fingerprint: str, note: str, routing: Routing) -> bool:
    """The cause went away: resolve the open alert of that fingerprint, if any."""
    alert_id = await repository.open_alert_by_fingerprint(conn, fingerprint)
    return alert_id is not None and await resolve(conn, alert_id, "alerter", note, routing)
