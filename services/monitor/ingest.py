"""The monitor's hot path: heartbeats in, batched writes out.

A 5,000-node cluster sends 5,000 heartbeats a second; one transaction each would be
more than Postgres on a small machine can take. So a heartbeat only updates memory
(``receive`` is synchronous and cheap), and writes go out in batches:

- every ``flush_interval_s`` (1 s): the registration of nodes that are new or whose
  GPUs changed, and the health rules for the few nodes whose GPUs report trouble
  (``health.suspicious`` tells, in memory) — so a dead GPU drains its node in seconds;
- every ``touch_interval_s`` (5 s): the liveness of every node heard (one statement);
- every ``readings_interval_s``: each GPU's latest readings and the ended history
  buckets, one multi-row statement each.

Monitor instances share heartbeats as a queue group; each writes what it heard, and the
statements merge (liveness is "latest wins", history buckets add up).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pydantic import ValidationError

from services.monitor.health import HealthRules, suspicious
from services.monitor.history import HistoryAggregator
from services.monitor.repository import (
    HistoryRow,
    check_health,
    gpu_owners,
    inventory,
    lock_nodes,
    register_nodes,
    touch_nodes,
    write_history,
    write_readings,
)
from services.monitor.settings import MonitorSettings
from shared.db.pool import Database
from shared.events import NodeTelemetry
from shared.events.nodes import NodeTelemetryData

log = logging.getLogger(__name__)
REGISTER_PER_FLUSH = 1000
SLOW_S = 1.0  # a batch write slower than this is worth a warning
HISTORY_BACKLOG_MAX = 500_000  # rows (about 2 minutes of a 5,000-node cluster)


@dataclass
class IngestCounters:
    heartbeats: int = 0
    samples: int = 0
    rejected: int = 0


@dataclass(frozen=True)
class _Registered:
    inventory: tuple[tuple[int, str, str, int], ...]
    expected_gpus: int


class HeartbeatIngest:
    def __init__(self, db: Database, rules: HealthRules, settings: MonitorSettings) -> None:
        self._db = db
        self._rules = rules
        self.counters = IngestCounters()
        self.history = HistoryAggregator(settings.history_resolution_s)
        self._fresh: dict[str, NodeTelemetryData] = {}  # heard since the last flush
        self._unwritten: dict[str, NodeTelemetryData] = {}  # readings not yet written
        self._registered: dict[str, _Registered] = {}
        self._health_due: dict[str, NodeTelemetryData] = {}
        self._health_seen: dict[str, tuple[object, ...]] = {}
        self._history_backlog: list[HistoryRow] = []
        self._untouched: dict[str, NodeTelemetryData] = {}  # heard, liveness not yet written
        self._touch_interval_s = min(settings.touch_interval_s, settings.heartbeat_timeout_s / 3)
        self._last_touch = 0.0
        self.last_flush = time.monotonic()  # when what was heard last reached Postgres

    def is_behind(self, limit_s: float) -> bool:
        """True when heard heartbeats have waited over ``limit_s`` to reach Postgres: a
        monitor that is behind must not declare the nodes it has not written silent."""
        return time.monotonic() - self.last_flush > limit_s

    def receive(self, payload: bytes) -> None:
        try:
            data = NodeTelemetry.model_validate_json(payload).data
        except ValidationError as exc:
            self.counters.rejected += 1
            if self.counters.rejected % 1000 == 1:  # say so, without flooding the log
                log.warning("heartbeat rejected (%d so far): %s", self.counters.rejected, exc)
            return
        self.counters.heartbeats += 1
        self.counters.samples += len(data.gpus)
        self._fresh[data.node_id] = data
        self._unwritten[data.node_id] = data
        self.history.add(data, time.time())
        known = self._registered.get(data.node_id)
        fingerprint = suspicious(data.gpus, known.expected_gpus if known else 0)
        if fingerprint != self._health_seen.get(data.node_id, ()):
            self._health_due[data.node_id] = data

    async def flush(self) -> None:
        """Registrations and health checks for what was heard since last time, and every
        ``touch_interval_s`` the liveness of every node heard since the last touch."""
        fresh, self._fresh = self._fresh, {}
        new = [d for d in fresh.values() if self._needs_registration(d)]
        if len(new) > REGISTER_PER_FLUSH:
            # A whole cluster appearing at once (a monitor start): register it in slices,
            # so no flush holds the event loop (and the heartbeats) for long.
            for data in new[REGISTER_PER_FLUSH:]:
                self._fresh[data.node_id] = data
            new = new[:REGISTER_PER_FLUSH]
        new_ids = {d.node_id for d in new}
        self._untouched.update((n, d) for n, d in fresh.items() if n not in new_ids and n not in self._fresh)
        touch = time.monotonic() - self._last_touch >= self._touch_interval_s
        untouched, self._untouched = (self._untouched, {}) if touch else ({}, self._untouched)
        health_due, self._health_due = self._health_due, {}
        started = time.monotonic()
        registered: dict[str, _Registered] = {}
        try:
            async with self._db.transaction() as conn:
                states = await lock_nodes(conn, [*(d.node_id for d in new), *untouched, *health_due])
                for node_id, expected in (await register_nodes(conn, new, states)).items():
                    registered[node_id] = _Registered(inventory(fresh[node_id]), expected)
                for node_id in await touch_nodes(conn, list(untouched.values())):
                    log.info("node %s is heard again; READY", node_id)
                for _, data in sorted(health_due.items()):
                    for f in await check_health(conn, data, self._rules):
                        log.warning("node %s: %s -> %s", data.node_id, f.detail, f.action)
        except BaseException:
            # Nothing was written: hear these again next time (newer heartbeats win).
            self._fresh = {**{d.node_id: d for d in new}, **self._fresh}
            self._untouched = {**untouched, **self._untouched}
            self._health_due = {**health_due, **self._health_due}
            raise
        self._registered.update(registered)
        now = time.monotonic()
        self.last_flush = now
        if touch:
            self._last_touch = now
        _say_if_slow("heartbeat flush", started, f"{len(new)} registered, {len(untouched)} touched")
        for node_id, data in health_due.items():
            if node_id not in self._registered:
                # Not stored yet (registration comes in slices): check it once it is.
                self._health_due.setdefault(node_id, data)
                continue
            self._health_seen[node_id] = suspicious(data.gpus, self._registered[node_id].expected_gpus)

    def _needs_registration(self, data: NodeTelemetryData) -> bool:
        known = self._registered.get(data.node_id)
        return known is None or known.inventory != inventory(data)

    async def write_readings(self) -> None:
        """Each registered GPU's latest readings and the history buckets that ended."""
        ready = {n: d for n, d in self._unwritten.items() if n in self._registered}
        for node_id in ready:
            del self._unwritten[node_id]
        started = time.monotonic()
        rows = self._history_backlog
        self._history_backlog = []
        try:
            async with self._db.transaction() as conn:
                rows += self.history.take_ended(time.time(), await gpu_owners(conn))
                await write_readings(conn, list(ready.values()))
                await write_history(conn, self.history.resolution_s, rows)
        except BaseException:
            self._unwritten = {**ready, **self._unwritten}
            self._history_backlog = rows[-HISTORY_BACKLOG_MAX:]  # Postgres away: keep the latest
            raise
        _say_if_slow("readings write", started, f"{len(ready)} nodes, {len(rows)} history rows")


def _say_if_slow(what: str, started: float, detail: str) -> None:
    took = time.monotonic() - started
    if took > SLOW_S:
        log.warning("%s took %.2f s (%s): this monitor is near its capacity", what, took, detail)
