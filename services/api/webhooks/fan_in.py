"""Events in, webhook deliveries out: the durable consumers that feed the delivery loop.

One durable pull consumer per lifecycle stream (``api-webhooks-*``), shared by every API
process (JetStream hands each message to one of them). For each event the handler finds
the enabled webhooks whose types, VC and owner's visibility match (``events/scope.py``,
the same rules as the SSE stream) and inserts one delivery row per webhook, keyed on
(webhook, event id): a redelivered event inserts nothing, so the handler is idempotent
without a processed-events row. The consumers start at "new" when first created: a
webhook gets events that happen after Corral starts delivering, not a week of history.

The payload stored is the event as the bus carries it: ``parse_event`` then
``model_dump_json`` of the same model class gives back the bytes the outbox published.

While no webhook is enabled the consumers do not run (``run_fan_in``): taking every
event off NATS, acking it and finding nobody to send it to would cost the API a large
share of its CPU per job, and NATS the acks, for nothing. When a webhook appears
(at once if it was created through this process, else within ``NO_WEBHOOKS_RECHECK_S``)
a consumer starts again from just before the moment it last found none
(``RESUME_MARGIN_S``): it is made anew from that time, so nothing since is missed and
the backlog of the pause is not replayed. A new webhook may therefore get an event from
a second or two before it was created.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from datetime import UTC, datetime

from services.api.events.scope import EventFilter, Scopes
from services.api.webhooks.repository import EnabledWebhook, WebhookRepository
from shared.aio import raise_if_cancelling, wait_event
from shared.bus import Bus, ConsumerConfig, ConsumerSpec, DeadLetterSink, run_consumer
from shared.bus.streams import ALERTS, JOBS, NODES
from shared.db.pool import DATABASE_ERRORS
from shared.events import Event

log = logging.getLogger(__name__)

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
# How far before its last "none" a resumed consumer starts: this process's clock and the
# NATS server's (which stamps the messages) may differ a little.
RESUME_MARGIN_S = 2.0


class WebhookFanIn:
    """``added`` is set by this process's ``createWebhook`` once the row is committed.

    Most clusters have no webhook, and every lifecycle event comes through here: asking
    Postgres for the enabled webhooks on each one would be a round trip per event (several
    per job) to learn nothing. So "none" is remembered for ``NO_WEBHOOKS_RECHECK_S``, and
    forgotten at once when this process creates one; a webhook created through another
    API process starts receiving within that second.
    """

    def __init__(
        self, repo: WebhookRepository, scopes: Scopes, wake: asyncio.Event, added: asyncio.Event
    ) -> None:
        self._repo = repo
        self._scopes = scopes
        self._wake = wake
        self._added = added
        self._none_until = 0.0  # monotonic time until which no webhook is assumed
        self.none_seen_at: float | None = None  # wall clock of the last read that found none
        self._some_until = 0.0  # monotonic time until which "some webhook" is believed

    async def _enabled(self) -> list[EnabledWebhook]:
        if time.monotonic() < self._none_until and not self._added.is_set():
            return []
        self._added.clear()  # before the read: a webhook committed after it sets it again
        hooks = await self._repo.enabled_webhooks()
        if not hooks:
            self._none_until = time.monotonic() + NO_WEBHOOKS_RECHECK_S
            self.none_seen_at = time.time()
        else:
            self._none_until = 0.0
            self._some_until = time.monotonic() + NO_WEBHOOKS_RECHECK_S
        return hooks

    async def has_webhooks(self) -> bool:
        """Whether a webhook is enabled; "yes" is believed for ``NO_WEBHOOKS_RECHECK_S``
        too (the three consumers' runners ask every second, the handler reads afresh)."""
        if time.monotonic() < self._some_until:
            return True
        return bool(await self._enabled())

    async def until_webhooks(self, present: bool) -> None:
        """Return once a webhook is enabled (``present``; at once when this process
        creates one) or none is. While Postgres is away, keep waiting: a paused fan-in
        stays paused, a running one runs on (its handler naks what it cannot match)."""
        while True:
            try:
                if await self.has_webhooks() == present:
                    return
            except DATABASE_ERRORS as exc:
                raise_if_cancelling()
                log.warning("webhook fan-in cannot read the webhooks (%s); will retry", exc)
            if present:
                await wait_event(self._added, NO_WEBHOOKS_RECHECK_S)
            else:
                await asyncio.sleep(NO_WEBHOOKS_RECHECK_S)

    async def handle(self, event: Event) -> None:
        hooks = await self._enabled()
        if not hooks:
            return  # nobody subscribed, so no facts to look up either
        payload = event.model_dump_json().encode()
        facts = await self._scopes.facts(payload)
        if facts is None:
            return
        matching = []
        for hook in hooks:
            wanted = EventFilter(
                types=tuple(hook.event_types),
                virtual_clusters=frozenset([hook.virtual_cluster] if hook.virtual_cluster else []),
            )
            if facts.visible_to(hook.username, hook.sees_all) and wanted.matches(facts):
                matching.append(hook.id)
        if not matching:
            return
        await self._repo.enqueue_delivery(matching, event.id, event.type, payload)
        self._wake.set()


async def run_fan_in(
    bus: Bus, config: ConsumerConfig, fan_in: WebhookFanIn, dead_letters: DeadLetterSink
) -> None:
    """Consume ``config`` into ``fan_in`` while a webhook is enabled, and not while none
    is (module doc); runs until cancelled."""
    await bus.subscribe(config)  # the durable exists from the start, at "new"
    while True:
        try:
            await fan_in.until_webhooks(present=True)
            consumer = config
            if fan_in.none_seen_at is not None:
                # Made anew from just before the last "none": what happened since, not the
                # pause's backlog (nor, if another API process's consumer ran, much twice:
                # a delivery is one per webhook and event, so a repeat adds nothing).
                since = datetime.fromtimestamp(fan_in.none_seen_at - RESUME_MARGIN_S, UTC)
                await bus.delete_consumer(config.stream, config.durable)
                consumer = replace(config, start_time=since)
            async with asyncio.TaskGroup() as tg:
                spec = ConsumerSpec(consumer, fan_in.handle)
                consuming = tg.create_task(run_consumer(bus, spec, dead_letters))
                await fan_in.until_webhooks(present=False)
                consuming.cancel()
        except* (ConnectionError, OSError, TimeoutError) as failed:
            # NATS away just as it resumes (the consumer loop rides out the rest itself).
            raise_if_cancelling()
            log.warning("webhook fan-in %s could not resume (%r); will retry", config.durable, failed)
            await asyncio.sleep(NO_WEBHOOKS_RECHECK_S)
