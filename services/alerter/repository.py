"""All of the alerter's SQL, through the named queries of ``sql/``: alerts and their
transitions, the notification queue and log, silences, rule overrides, and the reads the
condition rules check. Nothing here decides, and no event is built here:
``alert_lifecycle.py``, ``notifications.py``, ``conditions.py`` and ``delivery.py``
decide. An admin's request (a silence, rule overrides) is written as asked.

An alert's row is handed on as a dict of its columns: that is what the payloads of
every receiver kind are made from (``payloads.py``).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import asyncpg

from services.alerter.rule_config import RulesInForce
from shared.db.pool import Connection
from shared.db.queries import Queries
from shared.events.alerts import AlertRulesRequestedData, SilenceRequestedData

SQL = Queries(Path(__file__).parent / "sql")


class ChangedAlert(NamedTuple):
    """An alert a state change applied to, and its state before."""

    id: str
    rule: str
    fingerprint: str
    previous_state: str


class Notification(NamedTuple):
    """One row of ``alerter.notifications`` (the key and where it goes), less its
    timing: a change of ``alert_id`` for ``receiver``, in round ``round_``."""

    alert_id: str
    event: str
    receiver: str
    kind: str
    url: str
    payload: dict[str, Any]
    group_key: str
    round_: int


class Told(NamedTuple):
    receiver: str
    group_key: str


class Silence(NamedTuple):
    id: str
    matchers: list[dict[str, Any]]


class OpenAlert(NamedTuple):
    id: str
    fingerprint: str


# --- alerts ------------------------------------------------------------------------------


async def insert_alert(
    conn: Connection,
    alert_id: str,
    rule: str,
    fingerprint: str,
    severity: str,
    summary: str,
    labels: dict[str, str],
    annotations: dict[str, str],
) -> str | None:
    """A new firing alert; None when one of that fingerprint is open already."""
    inserted: str | None = await conn.fetchval(
        SQL.open_alert, alert_id, rule, fingerprint, severity, summary, labels, annotations
    )
    return inserted


async def record_transition(
    conn: Connection, alert_id: str, from_state: str | None, to_state: str, by: str, note: str
) -> None:
    await conn.execute(SQL.record_transition, alert_id, from_state, to_state, by, note)


async def acknowledge(conn: Connection, alert_id: str, by: str) -> ChangedAlert | None:
    """firing → acknowledged; None if it was not firing (or does not exist)."""
    row = await conn.fetchrow(SQL.acknowledge, alert_id, by)
    return None if row is None else ChangedAlert(row["id"], row["rule"], row["fingerprint"], "firing")


async def resolve(conn: Connection, alert_id: str, by: str) -> ChangedAlert | None:
    """firing or acknowledged → resolved; None if it was resolved (or does not exist)."""
    row = await conn.fetchrow(SQL.resolve, alert_id, by)
    if row is None:
        return None
    return ChangedAlert(row["id"], row["rule"], row["fingerprint"], row["previous_state"])


async def open_alert_by_fingerprint(conn: Connection, fingerprint: str) -> str | None:
    alert_id: str | None = await conn.fetchval(SQL.open_alert_by_fingerprint, fingerprint)
    return alert_id


async def alert_row(conn: Connection, alert_id: str) -> dict[str, Any] | None:
    row = await conn.fetchrow(SQL.alert_row, alert_id)
    return None if row is None else dict(row)


async def firing_alerts(conn: Connection) -> list[dict[str, Any]]:
    """The alerts nobody acknowledged yet, oldest first, with their ``age_s``."""
    return [dict(row) for row in await conn.fetch(SQL.firing_alerts)]


async def repeat_candidates(conn: Connection, one_shot_rules: list[str]) -> list[dict[str, Any]]:
    """Alerts still firing (not of ``one_shot_rules``), each with a receiver's latest
    round of the firing: ``receiver``, ``group_key``, ``round``, ``last_state`` (sent or
    suppressed) and ``since_s``."""
    return [dict(row) for row in await conn.fetch(SQL.repeat_candidates, one_shot_rules)]


async def open_condition_alerts(conn: Connection, rules: list[str]) -> list[OpenAlert]:
    return [
        OpenAlert(row["id"], row["fingerprint"]) for row in await conn.fetch(SQL.open_condition_alerts, rules)
    ]


async def job_owner(conn: Connection, job_id: str) -> tuple[str, str] | None:
    """(user, virtual cluster) of the job, if it exists."""
    row = await conn.fetchrow(SQL.job_owner, job_id)
    return None if row is None else (row["username"], row["virtual_cluster"])


# --- notifications -----------------------------------------------------------------------


async def receivers_told(conn: Connection, alert_id: str) -> list[Told]:
    """The receivers told (or being told) of the alert's firing, with their group."""
    return [Told(row["receiver"], row["group_key"]) for row in await conn.fetch(SQL.receivers_told, alert_id)]


async def group_due(
    conn: Connection,
    receiver: str,
    group_key: str,
    alert_id: str,
    wait_s: float,
    interval_s: float,
    firing: bool,
) -> datetime | None:
    """When a change of ``alert_id`` is due at ``receiver`` in its group (see the query)."""
    due: datetime | None = await conn.fetchval(
        SQL.group_due, receiver, group_key, alert_id, wait_s, interval_s, firing
    )
    return due


async def enqueue_notification(conn: Connection, notification: Notification, due: datetime | None) -> bool:
    """Queue it, due at ``due`` (None: now); False if it was queued already."""
    return await conn.execute(SQL.enqueue_notification, *notification, due) == "INSERT 0 1"


async def enqueue_suppressed(conn: Connection, notification: Notification, suppressed_by: str) -> bool:
    """Log it as suppressed (never sent); False if it was logged already."""
    return await conn.execute(SQL.enqueue_suppressed, *notification, suppressed_by) == "INSERT 0 1"


async def claim_notifications(conn: Connection, lease_s: float, limit: int) -> list[asyncpg.Record]:
    """Up to ``limit`` notifications due now, leased for ``lease_s``."""
    return await conn.fetch(SQL.claim_notifications, lease_s, limit)


async def notification_sent(conn: Connection, notification_id: int, status: int | None) -> None:
    await conn.execute(SQL.notification_sent, notification_id, status)


async def group_sent(conn: Connection, receiver: str, group_key: str) -> None:
    await conn.execute(SQL.group_sent, receiver, group_key)


async def notification_failed(conn: Connection, notification_id: int, status: int | None, error: str) -> None:
    await conn.execute(SQL.notification_failed, notification_id, status, error)


async def notification_retry(
    conn: Connection, notification_id: int, backoff_s: float, status: int | None, error: str
) -> None:
    await conn.execute(SQL.notification_retry, notification_id, backoff_s, status, error)


# --- silences and inhibition -------------------------------------------------------------


async def active_silences(conn: Connection) -> list[Silence]:
    return [Silence(row["id"], row["matchers"]) for row in await conn.fetch(SQL.active_silences)]


async def open_unreachable_for_node(conn: Connection, node: str) -> str | None:
    """The open ``NodeUnreachable`` alert of the node, if any."""
    alert_id: str | None = await conn.fetchval(SQL.open_unreachable_for_node, node)
    return alert_id


async def apply_silence_request(conn: Connection, request: SilenceRequestedData) -> bool:
    """Create or expire a silence as asked; False if that changed nothing."""
    if request.action == "expire":
        return await conn.execute(SQL.expire_silence, request.silence_id, request.by) == "UPDATE 1"
    status = await conn.execute(
        SQL.create_silence,
        request.silence_id,
        [m.model_dump() for m in request.matchers],
        request.starts_at,
        request.ends_at,
        request.by,
        request.comment,
    )
    return bool(status == "INSERT 0 1")


# --- what the condition rules check ------------------------------------------------------


async def jobs_pending_longer_than(conn: Connection, after_s: float) -> list[asyncpg.Record]:
    return await conn.fetch(SQL.jobs_pending_longer_than, after_s)


async def idle_jobs(conn: Connection, for_s: float, below_pct: float) -> list[asyncpg.Record]:
    return await conn.fetch(SQL.idle_jobs, for_s, below_pct)


async def starved_virtual_clusters(conn: Connection, after_s: float) -> list[asyncpg.Record]:
    return await conn.fetch(SQL.starved_virtual_clusters, after_s)


async def silent_services(conn: Connection, after_s: float, services: list[str]) -> list[asyncpg.Record]:
    return await conn.fetch(SQL.silent_services, after_s, services)


# --- rules -------------------------------------------------------------------------------


async def set_rule_overrides(conn: Connection, request: AlertRulesRequestedData) -> None:
    overrides = request.overrides if request.action == "set" else {}
    await conn.execute(SQL.set_rule_overrides, overrides, request.by)


async def rule_overrides(conn: Connection) -> tuple[dict[str, Any], int]:
    row = await conn.fetchrow(SQL.rule_overrides)
    return (dict(row["overrides"]), int(row["version"])) if row else ({}, 0)


async def publish_rules_in_force(conn: Connection, rules: RulesInForce) -> None:
    path = str(rules.file.path) if rules.file.path else None
    await conn.execute(
        SQL.publish_rules_in_force, rules.current.model_dump(), path, rules.problem, rules.overrides_version
    )
