"""Sending queued notifications: retried with backoff, one slow receiver never stalls another.

Each round claims the due rows (a lease: ``claim_notifications``), makes one message of
each group's rows (``payloads.combine``; PagerDuty's one by one), sends them all at once,
each with its own timeout, and records each outcome:

- 2xx (SMTP: accepted): sent;
- 5xx, 429, a timeout or a connection error: retried after 1, 2, 4 ... s (at most
  ``max_backoff_s``), for ``give_up_after_s`` (a day) before it is marked failed;
- any other 4xx: failed at once (the receiver said the request itself is wrong).

Every attempt's status and error stay on the row: the notification log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import smtplib
from datetime import UTC, datetime
from email.message import EmailMessage
from typing import Any

import httpx

from services.alerter import metrics, repository
from services.alerter.payloads import combine
from services.alerter.settings import AlerterSettings
from shared.aio import raise_if_cancelling
from shared.db.pool import DATABASE_ERRORS, Connection, Database

log = logging.getLogger(__name__)
RETRYABLE = {408, 425, 429}


class Deliverer:
    def __init__(self, db: Database, settings: AlerterSettings, http: httpx.AsyncClient) -> None:
        self._db = db
        self._settings = settings
        self._http = http
        self.wake = asyncio.Event()

    async def run(self) -> None:
        """Deliver whenever woken (a change was queued) and at least every interval."""

        while True:
            try:
                while await self.deliver_due():
                    pass
            except DATABASE_ERRORS as exc:
                raise_if_cancelling()
                log.warning("notification delivery paused (%s)", exc)  # Postgres away: wait, retry
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self._settings.delivery_interval_s)
            self.wake.clear()

    async def deliver_due(self) -> int:
        """Send what is due now; returns how many notifications were claimed."""
        async with self._db.transaction() as conn:
            rows = await repository.claim_notifications(conn, self._settings.delivery_lease_s, 100)
        if rows:
            in_order = sorted((dict(r) for r in rows), key=lambda r: int(r["id"]))  # as they happened
            await asyncio.gather(*(self._deliver(batch) for batch in _batches(in_order)))
        return len(rows)

    async def _deliver(self, batch: list[dict[str, Any]]) -> None:
        first = batch[0]
        with metrics.DELIVERY_DURATION.labels(first["kind"]).time():
            status, error = await self._send(
                first["kind"], first["url"], combine(first["kind"], [r["payload"] for r in batch])
            )
        async with self._db.transaction() as conn:
            if error is None:
                for row in batch:
                    await repository.notification_sent(conn, row["id"], status)
                await repository.group_sent(conn, first["receiver"], first["group_key"])
                metrics.DELIVERIES.labels(first["kind"], "sent").inc()
                return
            outcomes = {await self._failed(conn, row, status, error) for row in batch}
        for outcome in outcomes:
            metrics.DELIVERIES.labels(first["kind"], outcome).inc()

    async def _send(self, kind: str, url: str, payload: dict[str, Any]) -> tuple[int | None, str | None]:
        """(status, error): error None when the receiver took it."""
        status: int | None = None
        timeout_s = self._settings.delivery_timeout_s
        try:
            if kind == "email":
                await asyncio.wait_for(asyncio.to_thread(send_email, url, payload, timeout_s), timeout_s + 1)
                return 250, None
            response = await self._http.post(url, json=payload, timeout=timeout_s)
            status = response.status_code
            return status, None if response.is_success else f"HTTP {status}: {response.text[:200]}"
        except smtplib.SMTPResponseException as exc:
            # SMTP's own codes: 4xx means try again later, 5xx never (mapped onto HTTP's sense).
            return 400 if exc.smtp_code >= 500 else 503, f"SMTP {exc.smtp_code}: {exc.smtp_error!r}"[:300]
        except (httpx.HTTPError, smtplib.SMTPException, OSError, TimeoutError) as exc:
            return status, f"{type(exc).__name__}: {exc}"[:300] or type(exc).__name__
        except Exception as exc:  # a message that cannot be sent at all: say so, never crash
            raise_if_cancelling()
            log.exception("a %s notification to %s cannot be sent", kind, url)
            return 400, f"cannot be sent: {type(exc).__name__}: {exc}"[:300]

    async def _failed(self, conn: Connection, row: dict[str, Any], status: int | None, error: str) -> str:
        """Schedule the row's next try, or give it up; says which ("retrying", "failed")."""
        age_s = (datetime.now(UTC) - row["created_at"]).total_seconds()
        permanent = status is not None and 400 <= status < 500 and status not in RETRYABLE
        if permanent or age_s > self._settings.give_up_after_s:
            log.error("notification %s to %s failed for good: %s", row["id"], row["receiver"], error)
            await repository.notification_failed(conn, row["id"], status, error)
            return "failed"
        backoff = min(2.0 ** (row["attempts"] - 1), self._settings.max_backoff_s)
        log.warning("notification %s to %s: %s; again in %.0fs", row["id"], row["receiver"], error, backoff)
        await repository.notification_retry(conn, row["id"], backoff, status, error)
        return "retrying"


def _batches(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The claimed rows as messages: one per (receiver, group) — PagerDuty's one per row."""
    batches: dict[tuple[object, ...], list[dict[str, Any]]] = {}
    for row in rows:
        alone = row["kind"] == "pagerduty" or not row["group_key"]
        key = ("row", row["id"]) if alone else (row["receiver"], row["group_key"], row["kind"], row["url"])
        batches.setdefault(key, []).append(row)
    return list(batches.values())


def send_email(url: str, message: dict[str, Any], timeout_s: float) -> None:
    """Blocking SMTP send (run in a thread); ``url`` is ``smtp[+starttls]://host:port``."""
    scheme, _, address = url.partition("://")
    host, _, port = address.rpartition(":")
    email = EmailMessage()
    email["From"] = message["from"]
    email["To"] = ", ".join(message["to"])
    email["Subject"] = " ".join(message["subject"].split())  # a header is one line
    email.set_content(message["body"])
    with smtplib.SMTP(host, int(port), timeout=timeout_s) as smtp:
        if scheme == "smtp+starttls":
            smtp.starttls()
        smtp.send_message(email)
