"""The alerter's consumers: lifecycle events in, alerts out (idempotently)."""

from __future__ import annotations

import asyncio
import logging

from services.alerter.repository import (
    acknowledge,
    apply_silence_request,
    open_alert,
    resolve,
    resolve_fingerprint,
)
from services.alerter.routing import RoutingFile
from services.alerter.rule_config import AlertRules
from services.alerter.rules import draft_for, resolutions
from services.alerter.yamlconfig import WatchedFile
from shared.bus import ConsumerConfig
from shared.bus.streams import ALERTS, JOBS, NODES
from shared.db.pool import Database
from shared.events import AlertActionRequested, Event, SilenceRequested
from shared.idempotency import first_time

log = logging.getLogger(__name__)

JOB_EVENTS = ConsumerConfig(
    stream=JOBS.name, durable="alerter-jobs", filter_subjects=("corral.job.failed.>",)
)
NODE_EVENTS = ConsumerConfig(
    stream=NODES.name,
    durable="alerter-nodes",
    filter_subjects=(
        "corral.node.unreachable.>",
        "corral.node.drained.>",
        "corral.node.registered.>",
        "corral.node.undrained.>",
    ),
)
ALERT_ACTIONS = ConsumerConfig(
    stream=ALERTS.name,
    durable="alerter-actions",
    filter_subjects=("corral.alert.action_requested.>", "corral.alert.silence_requested.>"),
)


class AlerterHandlers:
    def __init__(
        self,
        db: Database,
        routing: RoutingFile,
        rules: WatchedFile[AlertRules],
        delivered: asyncio.Event | None = None,
    ) -> None:
        self._db = db
        self._routing = routing
        self._rules = rules
        self._wake_delivery = delivered or asyncio.Event()

    async def handle(self, event: Event) -> None:
        draft = draft_for(event, self._rules.current.events)
        ends = resolutions(event)
        action = event.data if isinstance(event, AlertActionRequested) else None
        silence = event.data if isinstance(event, SilenceRequested) else None
        if draft is None and not ends and action is None and silence is None:
            return
        routing = self._routing.routing
        async with self._db.transaction() as conn:
            if not await first_time(conn, "alerter", event.id):
                return
            if draft is not None:
                await open_alert(conn, draft, routing)
            for fingerprint, why in ends:
                await resolve_fingerprint(conn, fingerprint, why, routing)
            if silence is not None and not await apply_silence_request(conn, silence):
                log.info("silence %s: %s changed nothing", silence.silence_id, silence.action)
            if action is not None:
                act = acknowledge if action.action == "acknowledge" else resolve
                if not await act(conn, action.alert_id, action.by, action.note, routing):
                    log.info("alert %s: %s by %s changed nothing", action.alert_id, action.action, action.by)
        self._wake_delivery.set()  # notifications may be queued: send them now
