"""The webhooks slice's SQL: subscriptions, secrets, deliveries and their log.

``owner`` arguments scope a call to one user's webhooks (None: an admin, every
webhook). Nothing here decides: a change reports what it found (``None``, ``False``, a
``Redelivery``) and the routes word the refusal; which outcome a delivery attempt has is
``delivery.py``'s to say.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from shared.db.pool import Database
from shared.db.queries import Queries

SQL = Queries(Path(__file__).parent / "sql")

# What a redelivery found: ``queued`` is the one that did something.
Redelivery = Literal["queued", "no-webhook", "disabled", "no-delivery"]


@dataclass(frozen=True, slots=True)
class WebhookRow:
    id: str
    username: str
    url: str
    event_types: list[str]
    virtual_cluster: str | None
    description: str
    enabled: bool
    disabled_reason: str | None
    created_at: datetime
    updated_at: datetime
    signing_secrets: int  # secrets in force: 2 during a rotation


@dataclass(frozen=True, slots=True)
class DeliveryRow:
    id: int
    event_id: str
    event_type: str
    state: str
    attempts: int
    next_attempt_at: datetime | None
    last_status: int | None
    last_error: str | None
    created_at: datetime
    queued_at: datetime
    finished_at: datetime | None
    log: list[dict[str, Any]]  # every attempt, oldest first


@dataclass(frozen=True, slots=True)
class EnabledWebhook:
    """What the fan-in matches each event against."""

    id: str
    username: str
    sees_all: bool  # an admin's, while its owner is still an admin
    event_types: list[str]
    virtual_cluster: str | None


@dataclass(frozen=True, slots=True)
class ClaimedDelivery:
    """A delivery leased for one attempt; ``attempts`` counts this one."""

    id: int
    webhook_id: str
    event_id: str
    payload: bytes
    attempts: int
    url: str


class WebhookRepository:
    def __init__(self, db: Database) -> None:
        self.db = db

    # --- subscriptions ---------------------------------------------------------------

    async def create(
        self,
        webhook_id: str,
        owner: str,
        sees_all: bool,
        url: str,
        event_types: tuple[str, ...],
        virtual_cluster: str | None,
        description: str,
        secret: str,
    ) -> WebhookRow | None:
        """None (nothing stored) when ``virtual_cluster`` does not exist or the owner may
        not use it; the VC is held FOR SHARE meanwhile, so it cannot go under the webhook."""
        async with self.db.transaction() as conn:
            vc_user = None if sees_all else owner
            if virtual_cluster is not None and not await conn.fetchval(
                SQL.vc_usable, virtual_cluster, vc_user
            ):
                return None
            row = await conn.fetchrow(
                SQL.insert_webhook,
                webhook_id,
                owner,
                sees_all,
                url,
                list(event_types),
                virtual_cluster,
                description,
            )
            assert row is not None
            await conn.execute(SQL.insert_webhook_secret, webhook_id, secret)
        return WebhookRow(**row, signing_secrets=1)

    async def find(self, owner: str | None, webhook_id: str | None = None) -> list[WebhookRow]:
        return [WebhookRow(**r) for r in await self.db.fetch(SQL.list_webhooks, owner, webhook_id)]

    async def delete(self, webhook_id: str, owner: str | None) -> bool:
        """The webhook, its secrets and its delivery log. False when there is no such
        webhook (of ``owner``'s)."""
        async with self.db.transaction() as conn:
            if await conn.fetchrow(SQL.lock_webhook, webhook_id, owner) is None:
                return False
            await conn.execute(SQL.delete_webhook, webhook_id)
        return True

    async def rotate_secret(self, webhook_id: str, owner: str | None, secret: str, until: datetime) -> bool:
        """Sign with ``secret`` from now on; the secrets in force keep signing beside it
        until ``until``. False when there is no such webhook (of ``owner``'s)."""
        async with self.db.transaction() as conn:
            if await conn.fetchrow(SQL.lock_webhook, webhook_id, owner) is None:
                return False
            await conn.execute(SQL.expire_webhook_secrets, webhook_id, until)
            await conn.execute(SQL.insert_webhook_secret, webhook_id, secret)
        return True

    async def deliveries(
        self, webhook_id: str, state: str | None, limit: int, delivery_id: int | None = None
    ) -> list[DeliveryRow]:
        rows = await self.db.fetch(SQL.list_deliveries, webhook_id, delivery_id, state, limit)
        return [DeliveryRow(**r) for r in rows]

    async def redeliver(self, webhook_id: str, owner: str | None, delivery_id: int) -> Redelivery:
        """Queue a delivery of an enabled webhook again now, with a fresh retry schedule
        (its log is kept)."""
        async with self.db.transaction() as conn:
            webhook = await conn.fetchrow(SQL.lock_webhook, webhook_id, owner)
            if webhook is None:
                return "no-webhook"
            if not webhook["enabled"]:
                return "disabled"
            if await conn.fetchval(SQL.redeliver, delivery_id, webhook_id) is None:
                return "no-delivery"
        return "queued"

    # --- the fan-in: events in, deliveries queued ---------------------------------------

    async def enabled_webhooks(self) -> list[EnabledWebhook]:
        return [EnabledWebhook(**r) for r in await self.db.fetch(SQL.enabled_webhooks)]

    async def enqueue_delivery(
        self, webhook_ids: list[str], event_id: str, event_type: str, payload: bytes
    ) -> None:
        """One delivery per (webhook, event): a redelivered event adds nothing."""
        await self.db.execute(SQL.enqueue_delivery, webhook_ids, event_id, event_type, payload)

    # --- the delivery loop ---------------------------------------------------------------

    async def claim_deliveries(
        self, lease_s: float, limit: int
    ) -> tuple[list[ClaimedDelivery], dict[str, list[str]]]:
        """Due deliveries of enabled webhooks, leased for ``lease_s``, and the secrets in
        force of their webhooks (newest first)."""
        async with self.db.transaction() as conn:
            rows = await conn.fetch(SQL.claim_deliveries, lease_s, limit)
            if not rows:
                return [], {}
            secrets: dict[str, list[str]] = {}
            for row in await conn.fetch(SQL.signing_secrets, list({r["webhook_id"] for r in rows})):
                secrets.setdefault(row["webhook_id"], []).append(row["secret"])
        return [ClaimedDelivery(**{**r, "payload": bytes(r["payload"])}) for r in rows], secrets

    async def delivered(self, delivery_id: int, status: int, duration_ms: int) -> None:
        async with self.db.transaction() as conn:
            await conn.execute(SQL.record_attempt, delivery_id, status, None, duration_ms)
            await conn.execute(SQL.delivery_succeeded, delivery_id, status)

    async def retry_later(
        self, delivery_id: int, delay_s: float, status: int | None, error: str, duration_ms: int
    ) -> None:
        async with self.db.transaction() as conn:
            await conn.execute(SQL.record_attempt, delivery_id, status, error, duration_ms)
            await conn.execute(SQL.delivery_retry, delivery_id, delay_s, status, error)

    async def failed(self, delivery_id: int, status: int | None, error: str, duration_ms: int) -> None:
        async with self.db.transaction() as conn:
            await conn.execute(SQL.record_attempt, delivery_id, status, error, duration_ms)
            await conn.execute(SQL.delivery_failed, delivery_id, status, error)

    async def disable(
        self, webhook_id: str, delivery_id: int, status: int, error: str, duration_ms: int, reason: str
    ) -> None:
        """The delivery failed, and the webhook is disabled: what waited for it fails too."""
        async with self.db.transaction() as conn:
            await conn.execute(SQL.record_attempt, delivery_id, status, error, duration_ms)
            await conn.execute(SQL.delivery_failed, delivery_id, status, error)
            await conn.execute(SQL.disable_webhook, webhook_id, reason)
