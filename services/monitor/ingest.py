"""The monitor's hot path: heartbeats in, batched writes out.

A 5,000-node cluster sends 5,000 heartbeats a second; one transaction each would be
more than Postgres on a small machine can take. So a heartbeat only updates memory
(``receive`` is synchronous and cheap), and writes go out in batches:

- every ``flush_interval_s`` (1 s): the registration of nodes that are new or whose
  GPUs changed, and the health rules for the few nodes whose GPUs report trouble
  (``health.suspicious`` tells, in memory) — so a dead GPU drains its node in seconds;
- every ``touch_interval_s`` (5 s): the liveness of every node heard (one statement);
- every ``readings_interval_s``: each GPU's latest readings and the ended history
  buckets, in multi-row statements (``repository.ROWS_PER_STATEMENT`` rows each).

What ``receive`` keeps of a heartbeat is its raw bytes, not the decoded model: a model
is some 50 objects (a ``GpuSample`` per GPU, its lists, their dicts), and kept for
seconds they outlive the young generations of Python's garbage collector, whose full
collections then scan them again and again, at 5,000 heartbeats/s for several times
what validating a heartbeat costs (docs/performance.md). Bytes are one
object the collector never scans. The paths that need a heartbeat whole (readings every
10 s, registration, health checks, a node back from silence) decode the bytes again;
they were validated on arrival.

Monitor instances share heartbeats as a queue group; each writes what it heard, and the
statements merge (liveness is "latest wins", history buckets add up).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from pydantic import ValidationError

from services.monitor.drains import check_health
from services.monitor.health import HealthRules, suspicious
from services.monitor.history import HistoryAggregator
from services.monitor.registration import announce_nodes, inventory, register_nodes
from services.monitor.repository import (
    HistoryRow,
    Inventory,
    ReadingsRow,
    gpu_owners,
    lock_nodes,
    readings_rows,
    touch_nodes,
    write_history,
    write_readings_rows,
)
from services.monitor.settings import MonitorSettings
from shared.db.pool import Database
from shared.events import NodeTelemetry
from shared.events.nodes import NodeTelemetryData

log = logging.getLogger(__name__)
REGISTER_PER_FLUSH = 1000
SLOW_S = 1.0  # a batch write slower than this is worth a warning
HISTORY_BACKLOG_MAX = 500_000  # rows (about 2 minutes of a 5,000-node cluster)
DECODE_BETWEEN_YIELDS = 250  # heartbeats decoded for the readings write per turn of the event loop


@dataclass
class IngestCounters:
    heartbeats: int = 0
    samples: int = 0
    rejected: int = 0


@dataclass(frozen=True)
class _Registered:
    inventory: Inventory
    expected_gpus: int


class HeartbeatIngest:
    def __init__(self, db: Database, rules: HealthRules, settings: MonitorSettings) -> None:
        self._db = db
        self._rules = rules
        self.counters = IngestCounters()
        self.history = HistoryAggregator(settings.history_resolution_s)
        # Node id -> its latest heartbeat's bytes (see the module's docstring), per purpose:
        self._unwritten: dict[str, bytes] = {}  # readings not yet written
        self._unregistered: dict[str, bytes] = {}  # new to this monitor, or its GPUs changed
        self._untouched: dict[str, bytes] = {}  # registered, liveness not yet written
        self._health_due: dict[str, bytes] = {}  # what the rules look at changed
        self._registered: dict[str, _Registered] = {}
        self._health_seen: dict[str, tuple[object, ...]] = {}
        self._history_backlog: list[HistoryRow] = []
        self._touch_interval_s = min(settings.touch_interval_s, settings.heartbeat_timeout_s / 3)
        self._last_touch = 0.0
        self.last_flush = time.monotonic()  # when what was heard last reached Postgres

    def is_behind(self, limit_s: float) -> bool:
        """True when heard heartbeats have waited over ``limit_s`` to reach Postgres: a
        monitor that is behind must not declare the nodes it has not written silent."""
        return time.monotonic() - self.last_flush > limit_s

    def receive(self, payload: bytes) -> None:
        """One heartbeat (per NATS message, 5,000 a second): validate it, count it, add it
        to the history, and note what the next flush and readings write owe it."""
        try:
            data = _decode(payload)
        except ValidationError as exc:
            self.counters.rejected += 1
            if self.counters.rejected % 1000 == 1:  # say so, without flooding the log
                log.warning("heartbeat rejected (%d so far): %s", self.counters.rejected, exc)
            return
        node_id = data.node_id
        self.counters.heartbeats += 1
        self.counters.samples += len(data.gpus)
        self._unwritten[node_id] = payload
        self.history.add(data, time.time())
        known = self._registered.get(node_id)
        if known is None or known.inventory != inventory(data):
            self._unregistered[node_id] = payload
        else:
            self._untouched[node_id] = payload
        fingerprint = suspicious(data.gpus, known.expected_gpus if known else 0, data.gpu_fault)
        if fingerprint != self._health_seen.get(node_id, ()):
            self._health_due[node_id] = payload

    async def flush(self) -> None:
        """Registrations and health checks for what was heard since last time, and every
        ``touch_interval_s`` the liveness of every node heard since the last touch."""
        unregistered, self._unregistered = self._unregistered, {}
        new: dict[str, NodeTelemetryData] = {}
        for node_id, payload in unregistered.items():
            if len(new) == REGISTER_PER_FLUSH:
                # A whole cluster appearing at once (a monitor start): register it in slices,
                # so no flush holds the event loop (and the heartbeats) for long.
                self._unregistered[node_id] = payload
                continue
            data = _decode(payload)
            if self._needs_registration(data):
                new[node_id] = data
            else:
                self._untouched.setdefault(node_id, payload)  # registered since it was heard
        touch = time.monotonic() - self._last_touch >= self._touch_interval_s
        untouched, self._untouched = (self._untouched, {}) if touch else ({}, self._untouched)
        health_due, self._health_due = self._health_due, {}
        checked = {node_id: _decode(payload) for node_id, payload in sorted(health_due.items())}
        started = time.monotonic()
        registered: dict[str, _Registered] = {}
        try:
            async with self._db.transaction() as conn:
                states = await lock_nodes(conn, [*new, *untouched, *checked])
                for node_id, expected in (await register_nodes(conn, list(new.values()), states)).items():
                    registered[node_id] = _Registered(inventory(new[node_id]), expected)
                back = await touch_nodes(conn, untouched)
                await announce_nodes(conn, [_decode(untouched[node_id]) for node_id in back])
                for node_id in back:
                    log.info("node %s is heard again; READY", node_id)
                for data in checked.values():
                    for f in await check_health(conn, data, self._rules):
                        log.warning("node %s: %s -> %s", data.node_id, f.detail, f.action)
        except BaseException:
            # Nothing was written: hear these again next time (newer heartbeats win).
            self._unregistered = {**{n: unregistered[n] for n in new}, **self._unregistered}
            self._untouched = {**untouched, **self._untouched}
            self._health_due = {**health_due, **self._health_due}
            raise
        self._registered.update(registered)
        now = time.monotonic()
        self.last_flush = now
        if touch:
            self._last_touch = now
        _say_if_slow("heartbeat flush", started, f"{len(new)} registered, {len(untouched)} touched")
        for node_id, data in checked.items():
            if node_id not in self._registered:
                # Not stored yet (registration comes in slices): check it once it is.
                self._health_due.setdefault(node_id, health_due[node_id])
                continue
            expected = self._registered[node_id].expected_gpus
            self._health_seen[node_id] = suspicious(data.gpus, expected, data.gpu_fault)

    def _needs_registration(self, data: NodeTelemetryData) -> bool:
        known = self._registered.get(data.node_id)
        return known is None or known.inventory != inventory(data)

    async def write_readings(self) -> None:
        """Each registered GPU's latest readings and the history buckets that ended."""
        ready = {n: p for n, p in self._unwritten.items() if n in self._registered}
        for node_id in ready:
            del self._unwritten[node_id]
        started = time.monotonic()
        rows = self._history_backlog
        self._history_backlog = []
        try:
            readings: list[ReadingsRow] = []
            for n, node_id in enumerate(sorted(ready)):  # (node, GPU) order: see write_readings_rows
                if n % DECODE_BETWEEN_YIELDS == DECODE_BETWEEN_YIELDS - 1:
                    await asyncio.sleep(0)  # thousands to decode: let the heartbeats in meanwhile
                readings += readings_rows(_decode(ready[node_id]))
            async with self._db.transaction() as conn:
                rows += self.history.take_ended(time.time(), await gpu_owners(conn))
                await write_readings_rows(conn, readings)
                await write_history(conn, self.history.resolution_s, rows)
        except BaseException:
            self._unwritten = {**ready, **self._unwritten}
            self._history_backlog = rows[-HISTORY_BACKLOG_MAX:]  # Postgres away: keep the latest
            raise
        _say_if_slow("readings write", started, f"{len(ready)} nodes, {len(rows)} history rows")


def _decode(payload: bytes) -> NodeTelemetryData:
    """A heartbeat, validated (``ValidationError`` if it is not one)."""
    return NodeTelemetry.model_validate_json(payload).data


def _say_if_slow(what: str, started: float, detail: str) -> None:
    took = time.monotonic() - started
    if took > SLOW_S:
        log.warning("%s took %.2f s (%s): this monitor is near its capacity", what, took, detail)
