"""The API's SQL for webhooks: subscriptions, secrets, deliveries and their log.

``owner`` arguments scope a call to one user's webhooks (None: an admin, every webhook);
someone else's webhook is reported as not found, never as forbidden, so its existence
does not leak.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from services.api.repository import SQL
from shared.clock import utcnow
from shared.db.pool import Connection, Database
from shared.errors import Conflict, InvalidInput, NotFound
from shared.ids import new_webhook_id


def _not_found(webhook_id: str) -> NotFound:
    return NotFound(f"no webhook with id {webhook_id!r}; list yours with GET /api/v1/webhooks")


class WebhookRepository:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(
        self,
        owner: str,
        sees_all: bool,
        url: str,
        event_types: tuple[str, ...],
        virtual_cluster: str | None,
        description: str,
        secret: str,
    ) -> dict[str, Any]:
        """A VC the owner may not use is reported as not existing, as it is everywhere else."""
        async with self.db.transaction() as conn:
            vc_user = None if sees_all else owner
            if virtual_cluster is not None and not await conn.fetchval(
                SQL.vc_for_submit, virtual_cluster, vc_user
            ):
                raise InvalidInput(
                    f"virtual cluster {virtual_cluster!r} does not exist; GET /api/v1/virtual-clusters"
                    " lists them"
                )
            row = await conn.fetchrow(
                SQL.insert_webhook,
                new_webhook_id(),
                owner,
                sees_all,
                url,
                list(event_types),
                virtual_cluster,
                description,
            )
            assert row is not None
            await conn.execute(SQL.insert_webhook_secret, row["id"], secret)
        return {**dict(row), "signing_secrets": 1}

    async def find(self, owner: str | None, webhook_id: str | None = None) -> list[dict[str, Any]]:
        return [dict(r) for r in await self.db.fetch(SQL.list_webhooks, owner, webhook_id)]

    async def get(self, webhook_id: str, owner: str | None) -> dict[str, Any]:
        rows = await self.find(owner, webhook_id)
        if not rows:
            raise _not_found(webhook_id)
        return rows[0]

    @staticmethod
    async def _lock(conn: Connection, webhook_id: str, owner: str | None) -> dict[str, Any]:
        row = await conn.fetchrow(SQL.lock_webhook, webhook_id, owner)
        if row is None:
            raise _not_found(webhook_id)
        return dict(row)

    async def delete(self, webhook_id: str, owner: str | None) -> None:
        """The webhook, its secrets and its delivery log; nothing more is sent."""
        async with self.db.transaction() as conn:
            await self._lock(conn, webhook_id, owner)
            await conn.execute(SQL.delete_webhook, webhook_id)

    async def rotate_secret(
        self, webhook_id: str, owner: str | None, secret: str, overlap_s: float
    ) -> datetime:
        """Sign with ``secret`` from now on; the secrets in force keep signing beside it
        until the returned time."""
        until = utcnow() + timedelta(seconds=overlap_s)
        async with self.db.transaction() as conn:
            await self._lock(conn, webhook_id, owner)
            await conn.execute(SQL.expire_webhook_secrets, webhook_id, until)
            await conn.execute(SQL.insert_webhook_secret, webhook_id, secret)
        return until

    async def deliveries(
        self,
        webhook_id: str,
        owner: str | None,
        state: str | None,
        limit: int,
        delivery_id: int | None = None,
    ) -> list[dict[str, Any]]:
        await self.get(webhook_id, owner)
        rows = await self.db.fetch(SQL.list_deliveries, webhook_id, delivery_id, state, limit)
        return [dict(r) for r in rows]

    async def redeliver(self, webhook_id: str, owner: str | None, delivery_id: int) -> None:
        """Send a delivery again now, with a fresh retry schedule (its log is kept)."""
        async with self.db.transaction() as conn:
            webhook = await self._lock(conn, webhook_id, owner)
            if not webhook["enabled"]:
                raise Conflict(
                    f"webhook {webhook_id} is disabled (its endpoint answered 410 Gone); create a new one"
                    " for a live endpoint"
                )
            if await conn.fetchval(SQL.redeliver, delivery_id, webhook_id) is None:
                raise NotFound(
                    f"webhook {webhook_id} has no delivery {delivery_id}; list them with"
                    f" GET /api/v1/webhooks/{webhook_id}/deliveries"
                )
