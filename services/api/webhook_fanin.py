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
import time

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


# How long "no webhook is enabled" is believed before asking Postgres again.
NO_WEBHOOKS_RECHECK_S = 1.0


class WebhookFanIn:
    """``added`` is set by this process's ``createWebhook`` once the row is committed.

    Most clusters have no webhook, and every lifecycle event comes through here: asking
    Postgres for the enabled webhooks on each one was a round trip per event (seven per
    job) to learn nothing. So "none" is remembered for ``NO_WEBHOOKS_RECHECK_S``, and
    forgotten at once when this process creates one; a webhook created through another
    API process starts receiving within that second.
    """

    def __init__(self, db: Database, scopes: Scopes, wake: asyncio.Event, added: asyncio.Event) -> None:
        self._db = db
        self._scopes = scopes
        self._wake = wake
        self._added = added
        self._none_until = 0.0  # monotonic time until which no webhook is assumed

    async def handle(self, event: Event) -> None:
        if time.monotonic() < self._none_until and not self._added.is_set():
            return
        self._added.clear()  # before the read: a webhook committed after it sets it again
        hooks = await self._db.fetch(SQL.enabled_webhooks)
        if not hooks:
            self._none_until = time.monotonic() + NO_WEBHOOKS_RECHECK_S
            return  # nobody subscribed, so no facts to look up either
        self._none_until = 0.0
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
