"""Events in, webhook deliveries out: the durable consumers that feed the delivery loop.

One durable pull consumer per lifecycle stream (``api-webhooks-*``), shared by every API
process (JetStream hands each message to one of them). For each event the handler finds
the enabled webhooks whose types, VC and owner's visibility match (``event_scope.py``,
the same rules as the SSE stream) and inserts one delivery row per webhook, keyed on
(webhook, event id): a redelivered event inserts nothing, so the handler is idempotent
without a processed-events row. The consumers start at "new" when first created: a
webhook gets events that happen after Corral starts delivering, not a week of history.

The payload stored is the event as the bus carries it: ``parse_event`` then
``model_dump_json`` of the same model class gives back the bytes the outbox published.
"""

from __future__ import annotations

import asyncio

from services.api.event_scope import EventFilter, Scopes
from services.api.repository import SQL
from shared.bus import ConsumerConfig
from shared.bus.streams import ALERTS, JOBS, NODES
from shared.db.pool import Database
from shared.events import Event

WEBHOOK_CONSUMERS = tuple(
    ConsumerConfig(
        stream=spec.name,
        durable=f"api-webhooks-{spec.name.removeprefix('CORRAL_').lower()}",
        filter_subjects=spec.subjects,
        deliver_all=False,
    )
    for spec in (JOBS, NODES, ALERTS)
)


class WebhookFanIn:
    def __init__(self, db: Database, scopes: Scopes, wake: asyncio.Event) -> None:
        self._db = db
        self._scopes = scopes
        self._wake = wake

    async def handle(self, event: Event) -> None:
        hooks = await self._db.fetch(SQL.enabled_webhooks)
        if not hooks:
            return  # the common case: nobody subscribed, so no facts to look up either
        payload = event.model_dump_json().encode()
        facts = await self._scopes.facts(payload)
        if facts is None:
            return
        matching = []
        for hook in hooks:
            wanted = EventFilter(
                types=tuple(hook["event_types"]),
                virtual_clusters=frozenset([hook["virtual_cluster"]] if hook["virtual_cluster"] else []),
            )
            if facts.visible_to(hook["username"], hook["sees_all"]) and wanted.matches(facts):
                matching.append(hook["id"])
        if not matching:
            return
        async with self._db.transaction() as conn:
            await conn.execute(SQL.enqueue_delivery, matching, event.id, event.type, payload)
        self._wake.set()
