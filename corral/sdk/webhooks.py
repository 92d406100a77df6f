"""Webhook subscriptions and their deliveries: the SDK's calls, mixed into ``Client`` and
``AsyncClient`` (built in ``operations.py``, run by the client's own ``_run``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from corral.sdk import operations as op
from corral.sdk.models import Delivery, RedeliveryAccepted, SecretRotated, Webhook, WebhookCreated

T = TypeVar("T")


class WebhookCalls:
    """The webhook methods of ``Client``."""

    def _run(self, call: op.Call[T]) -> T:
        raise NotImplementedError  # the client's

    def list_webhooks(self) -> list[Webhook]:
        return self._run(op.list_webhooks())

    def get_webhook(self, webhook_id: str) -> Webhook:
        return self._run(op.get_webhook(webhook_id))

    def create_webhook(
        self,
        url: str,
        event_types: Sequence[str],
        virtual_cluster: str | None = None,
        description: str = "",
    ) -> WebhookCreated:
        """Subscribe ``url``; the answer's ``secret`` is shown only now."""
        return self._run(op.create_webhook(url, event_types, virtual_cluster, description))

    def delete_webhook(self, webhook_id: str) -> None:
        self._run(op.delete_webhook(webhook_id))

    def rotate_webhook_secret(self, webhook_id: str, overlap_s: float | None = None) -> SecretRotated:
        return self._run(op.rotate_webhook_secret(webhook_id, overlap_s))

    def list_deliveries(self, webhook_id: str, state: str | None = None, limit: int = 100) -> list[Delivery]:
        return self._run(op.list_deliveries(webhook_id, state, limit))

    def redeliver(self, webhook_id: str, delivery_id: int) -> RedeliveryAccepted:
        return self._run(op.redeliver(webhook_id, delivery_id))


class AsyncWebhookCalls:
    """The webhook methods of ``AsyncClient``."""

    async def _run(self, call: op.Call[T]) -> T:
        raise NotImplementedError  # the client's

    async def list_webhooks(self) -> list[Webhook]:
        return await self._run(op.list_webhooks())

    async def get_webhook(self, webhook_id: str) -> Webhook:
        return await self._run(op.get_webhook(webhook_id))

    async def create_webhook(
        self,
        url: str,
        event_types: Sequence[str],
        virtual_cluster: str | None = None,
        description: str = "",
    ) -> WebhookCreated:
        """Subscribe ``url``; the answer's ``secret`` is shown only now."""
        return await self._run(op.create_webhook(url, event_types, virtual_cluster, description))

    async def delete_webhook(self, webhook_id: str) -> None:
        await self._run(op.delete_webhook(webhook_id))

    async def rotate_webhook_secret(self, webhook_id: str, overlap_s: float | None = None) -> SecretRotated:
        return await self._run(op.rotate_webhook_secret(webhook_id, overlap_s))

    async def list_deliveries(
        self, webhook_id: str, state: str | None = None, limit: int = 100
    ) -> list[Delivery]:
        return await self._run(op.list_deliveries(webhook_id, state, limit))

    async def redeliver(self, webhook_id: str, delivery_id: int) -> RedeliveryAccepted:
        return await self._run(op.redeliver(webhook_id, delivery_id))
