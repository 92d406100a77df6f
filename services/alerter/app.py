"""Composition root of the alerter service: events in, alerts and notifications out."""

from __future__ import annotations

import asyncio
import logging
from functools import partial

import httpx

from services.alerter.conditions import reconcile_conditions
from services.alerter.delivery import Deliverer
from services.alerter.handlers import ALERT_ACTIONS, JOB_EVENTS, NODE_EVENTS, TASK_EVENTS, AlerterHandlers
from services.alerter.notifications import escalate_due, repeat_due
from services.alerter.repository import publish_rules_in_force, rule_overrides
from services.alerter.routing import RoutingFile
from services.alerter.rule_config import RulesInForce
from services.alerter.settings import Settings
from shared.bus import ConsumerSpec, run_consumer
from shared.idempotency import FORGET_EVERY_S, forget_processed
from shared.service import every, run_service, service_resources

log = logging.getLogger(__name__)


async def serve(settings: Settings) -> None:
    config = settings.alerter
    routing = RoutingFile(config.routing_file)
    rules = RulesInForce(config.rules_file, config.runbook_base_url)
    async with service_resources("alerter", settings.common) as res, httpx.AsyncClient() as http:
        deliverer = Deliverer(res.db, config, http)
        published = False

        async def refresh_rules() -> None:
            """The file and the API's overrides, merged; published when they change."""
            nonlocal published
            async with res.db.transaction() as conn:
                overrides, version = await rule_overrides(conn)
                if rules.refresh(overrides, version) or not published:
                    await publish_rules_in_force(conn, rules)
                    published = True

        handlers = AlerterHandlers(res.db, routing, rules, deliverer.wake, refresh_rules)

        async def reload_files() -> None:
            routing.reload()
            await refresh_rules()

        async def check_conditions() -> None:
            async with res.db.transaction() as conn:
                opened, resolved = await reconcile_conditions(conn, rules.current, routing.routing)
            if opened or resolved:
                log.info("condition alerts: %d opened, %d resolved", len(opened), len(resolved))
                deliverer.wake.set()

        async def follow_up() -> None:
            async with res.db.transaction() as conn:
                escalated = await escalate_due(conn, routing.routing)
                repeated = await repeat_due(conn, routing.routing)
            for alert_id, receiver in escalated:
                log.warning("alert %s not acknowledged in time: escalated to %s", alert_id, receiver)
            if escalated or repeated:
                deliverer.wake.set()

        async with asyncio.TaskGroup() as tg:
            res.start_common_tasks(tg)
            for consumer in (JOB_EVENTS, TASK_EVENTS, NODE_EVENTS, ALERT_ACTIONS):
                spec = ConsumerSpec(consumer, handlers.handle)
                tg.create_task(run_consumer(res.bus, spec, res.dead_letters), name=consumer.durable)
            tg.create_task(
                every(FORGET_EVERY_S, partial(forget_processed, res.db), "processed events upkeep"),
                name="processed-events",
            )
            tg.create_task(deliverer.run(), name="delivery")
            tg.create_task(every(config.routing_check_s, reload_files, "configuration reload"), name="reload")
            tg.create_task(
                every(config.conditions_check_s, check_conditions, "condition rules"), name="conditions"
            )
            tg.create_task(
                every(config.escalation_check_s, follow_up, "escalation and repeats"), name="follow-ups"
            )


def main() -> int:
    settings = Settings()
    return run_service("alerter", lambda: serve(settings))
