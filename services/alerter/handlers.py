"""The alerter's consumers: lifecycle events in, alerts out (idempotently)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from services.alerter import repository
from services.alerter.alert_lifecycle import acknowledge, open_alert, resolve, resolve_fingerprint
from services.alerter.repository import apply_silence_request, set_rule_overrides
from services.alerter.routing import RoutingFile
from services.alerter.rule_config import RulesInForce
from services.alerter.rules import AlertDraft, draft_for, resolutions
from shared.bus import ConsumerConfig
from shared.bus.streams import ALERTS, JOBS, NODES
from shared.db.pool import Connection, Database
from shared.events import (
    AlertActionRequested,
    AlertRulesRequested,
    Event,
    JobFailed,
    NodeDrained,
    NodeRegistered,
    NodeUndrained,
    NodeUnreachable,
    SilenceRequested,
    TaskOverLimit,
    subjects_of,
)
from shared.idempotency import first_time

log = logging.getLogger(__name__)

JOB_EVENTS = ConsumerConfig(stream=JOBS.name, durable="alerter-jobs", filter_subjects=subjects_of(JobFailed))
# A consumer of its own: NATS holds a consumer to one filter (shared/bus/identities.py).
TASK_EVENTS = ConsumerConfig(
    stream=JOBS.name, durable="alerter-tasks", filter_subjects=subjects_of(TaskOverLimit)
)
NODE_EVENTS = ConsumerConfig(
    stream=NODES.name,
    durable="alerter-nodes",
    filter_subjects=subjects_of(NodeUnreachable, NodeDrained, NodeRegistered, NodeUndrained),
)
ALERT_ACTIONS = ConsumerConfig(
    stream=ALERTS.name,
    durable="alerter-actions",
    filter_subjects=subjects_of(AlertActionRequested, SilenceRequested, AlertRulesRequested),
)


class AlerterHandlers:
    def __init__(
        self,
        db: Database,
        routing: RoutingFile,
        rules: RulesInForce,
        delivered: asyncio.Event | None = None,
        rules_requested: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._db = db
        self._routing = routing
        self._rules = rules
        self._wake_delivery = delivered or asyncio.Event()
        self._rules_requested = rules_requested

    async def handle(self, event: Event) -> None:
        draft = draft_for(event, self._rules.current.events)
        ends = resolutions(event)
        action = event.data if isinstance(event, AlertActionRequested) else None
        silence = event.data if isinstance(event, SilenceRequested) else None
        if isinstance(event, AlertRulesRequested):
            await self._change_rules(event)
            return
        if draft is None and not ends and action is None and silence is None:
            return
        routing = self._routing.routing
        async with self._db.transaction() as conn:
            if not await first_time(conn, "alerter", event.id):
                return
            if draft is not None:
                await open_alert(conn, await _with_owner(conn, draft), routing)
            for fingerprint, why in ends:
                await resolve_fingerprint(conn, fingerprint, why, routing)
            if silence is not None and not await apply_silence_request(conn, silence):
                log.info("silence %s: %s changed nothing", silence.silence_id, silence.action)
            if action is not None:
                act = acknowledge if action.action == "acknowledge" else resolve
                if not await act(conn, action.alert_id, action.by, action.note, routing):
                    log.info("alert %s: %s by %s changed nothing", action.alert_id, action.action, action.by)
        self._wake_delivery.set()  # notifications may be queued: send them now

    async def _change_rules(self, event: AlertRulesRequested) -> None:
        async with self._db.transaction() as conn:
            if not await first_time(conn, "alerter", event.id):
                return
            await set_rule_overrides(conn, event.data)
        log.info("alert rule overrides %s by %s", event.data.action, event.data.by)
        if self._rules_requested is not None:
            await self._rules_requested()  # in force now, not at the next reload


async def _with_owner(conn: Connection, draft: AlertDraft) -> AlertDraft:
    """A job's alert names its owner and virtual cluster, so routes can reach the owner."""
    job_id = draft.labels.get("job")
    found = await repository.job_owner(conn, job_id) if job_id else None
    if found is None:
        return draft
    owner = {"user": found[0], "virtual_cluster": found[1]}
    return replace(draft, labels={**draft.labels, **owner})
