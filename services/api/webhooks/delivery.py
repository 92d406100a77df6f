"""Sending webhook deliveries: signed, retried on a schedule, logged, shared by API processes.

Each round claims due deliveries of enabled webhooks (a lease, ``FOR UPDATE SKIP
LOCKED``: several API processes share the rows, and a crash mid-send only means the row
is due again when its lease ends), posts them all at once (each with its own timeout, so
a hanging endpoint holds up nothing else), and records every attempt with what the
endpoint answered:

- 2xx: delivered;
- 410 Gone: the endpoint says it will never want more — the webhook is disabled and
  what waited for it is failed (Standard Webhooks);
- anything else, a timeout or a refused connection: tried again after the next delay of
  ``webhook_retry_delays_s`` (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h: about a day and
  a quarter in all), then failed. ``POST .../redeliver`` queues it again with a fresh
  schedule.

Why in the API: the API owns webhook subscriptions (DESIGN.md §1), every API process
already has the database and the bus, and the rows make the work safe to share, so
delivery scales with the API and needs no service of its own. Redirects are not
followed: a signed delivery goes where its owner said, nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import httpx

from services.api.settings import ApiSettings
from services.api.webhooks.repository import ClaimedDelivery, WebhookRepository
from services.api.webhooks.signing import signed_headers
from shared.aio import raise_if_cancelling
from shared.db.pool import DATABASE_ERRORS

log = logging.getLogger(__name__)


class WebhookDeliverer:
    def __init__(
        self, repo: WebhookRepository, settings: ApiSettings, http: httpx.AsyncClient, wake: asyncio.Event
    ) -> None:
        self._repo = repo
        self._settings = settings
        self._http = http
        self.wake = wake
        self.poll_s = 1.0

    async def run(self) -> None:
        """Deliver whenever woken (an event was queued) and at least every second."""
        while True:
            self.wake.clear()
            try:
                while await self.deliver_due():
                    pass
            except DATABASE_ERRORS as exc:
                raise_if_cancelling()
                log.warning("webhook delivery paused (%s)", exc)  # Postgres away: wait, retry
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.poll_s)

    async def deliver_due(self) -> int:
        """Send what is due now; returns how many deliveries were claimed."""
        rows, secrets = await self._repo.claim_deliveries(
            self._settings.webhook_lease_s, self._settings.webhook_concurrency
        )
        await asyncio.gather(*(self._deliver(r, secrets.get(r.webhook_id, [])) for r in rows))
        return len(rows)

    async def _deliver(self, row: ClaimedDelivery, secrets_in_force: list[str]) -> None:
        body = row.payload
        headers = signed_headers(secrets_in_force, row.event_id, int(time.time()), body)
        started = time.monotonic()
        status: int | None = None
        error: str | None = None
        try:
            response = await self._http.post(
                row.url, content=body, headers=headers, timeout=self._settings.webhook_timeout_s
            )
            status = response.status_code
            if not response.is_success:
                error = f"HTTP {status}: {response.text[:200]}"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:300] or type(exc).__name__
        duration_ms = int((time.monotonic() - started) * 1000)
        if error is None:
            assert status is not None
            await self._repo.delivered(row.id, status, duration_ms)
        elif status == 410:
            reason = f"disabled: {row.url} answered 410 Gone"
            log.warning("webhook %s %s", row.webhook_id, reason)
            await self._repo.disable(row.webhook_id, row.id, status, error, duration_ms, reason)
        elif row.attempts <= len(self._settings.webhook_retry_delays_s):
            delay = self._settings.webhook_retry_delays_s[row.attempts - 1]
            log.info("webhook delivery %s: %s; again in %.0fs", row.id, error, delay)
            await self._repo.retry_later(row.id, delay, status, error, duration_ms)
        else:
            log.warning("webhook delivery %s failed for good: %s", row.id, error)
            await self._repo.failed(row.id, status, error, duration_ms)
