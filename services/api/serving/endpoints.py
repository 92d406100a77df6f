"""Where ``/serve/{name}/`` sends a request: each service's ready replicas, as Postgres
last said, and why there are none when there are none.

A replica is in rotation while its job is linked to the service and not draining, its
live attempt is RUNNING and ``ready`` (a node agent's readiness probe, or a pod's Ready
condition: migration 0034), and the attempt has a host and the allocated port of the
service's port label. The whole table is read in one statement
(``sql/endpoints.sql``) at most every ``REFRESH_S`` and only when a request asks for it:
an API process nobody calls services through reads nothing, a busy one reads twice a
second, and a replica joins or leaves rotation within that (the probe's period aside).

Between reads the gateway may learn something Postgres does not know yet: a replica it
cannot connect to (killed, its node gone). ``mark_down`` takes that attempt out of
rotation in this process for ``DOWN_S``, or until a read no longer lists it (a restarted
replica is a new attempt, so it comes back as soon as it is ready); meanwhile requests
go to the others. Only for a while: a replica that merely missed one connection (its
accept queue full) must not stay out of this process's rotation for good.

Concurrency: one read at a time (a lock); a request that finds the table stale while a
read is under way uses the stale table rather than wait, unless there is none yet.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.db.pool import Database
from shared.db.queries import Queries

SQL = Queries(Path(__file__).parent / "sql")

REFRESH_S = 0.5
# How long a replica that refused a connection stays out of rotation here, unless
# Postgres stops listing it sooner: long enough for its node or the controller to notice
# a dead replica, short enough that one that only missed a connection comes back.
DOWN_S = 5.0


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One ready replica: where its server listens."""

    attempt_id: str
    job_id: str
    host: str
    port: int


@dataclass(slots=True)
class ServiceRoute:
    """A service as the gateway sees it: who may call it, and where."""

    name: str
    owner: str
    public: bool
    endpoints: list[Endpoint]
    reason: str  # why no replica is ready; "" while some is
    _turn: itertools.count[int] = field(default_factory=itertools.count)

    def rotation(self, down: Container[str]) -> list[Endpoint]:
        """The ready endpoints not known to be down, starting at the next one in turn
        (round-robin across this process's requests)."""
        live = [e for e in self.endpoints if e.attempt_id not in down]
        if len(live) < 2:
            return live
        start = next(self._turn) % len(live)
        return live[start:] + live[:start]


class EndpointTable:
    def __init__(self, db: Database, refresh_s: float = REFRESH_S) -> None:
        self._db = db
        self._refresh_s = refresh_s
        self._routes: dict[str, ServiceRoute] | None = None
        self._read_at = 0.0
        self._lock = asyncio.Lock()
        self._down: dict[str, float] = {}  # attempt id -> until when (monotonic)

    async def route(self, name: str) -> ServiceRoute | None:
        """The service ``name`` as of at most ``refresh_s`` ago; None if there is none."""
        stale = self._routes is None or time.monotonic() - self._read_at >= self._refresh_s
        # Stale while another request reads: the table of a moment ago does, rather than wait.
        if stale and (self._routes is None or not self._lock.locked()):
            await self._refresh()
        assert self._routes is not None
        return self._routes.get(name)

    def rotation(self, route: ServiceRoute) -> list[Endpoint]:
        if self._down:
            now = time.monotonic()
            self._down = {attempt: until for attempt, until in self._down.items() if until > now}
        return route.rotation(self._down)

    def mark_down(self, endpoint: Endpoint) -> None:
        """Out of rotation here until Postgres stops listing this attempt."""
        self._down[endpoint.attempt_id] = time.monotonic() + DOWN_S

    async def _refresh(self) -> None:
        async with self._lock:
            if self._routes is not None and time.monotonic() - self._read_at < self._refresh_s:
                return  # another request read it while this one waited
            rows = await self._db.fetch(SQL.serving_table)
            previous = self._routes or {}
            routes = build_routes(rows)
            for name, route in routes.items():
                if name in previous:  # keep each service's turn across reads
                    route._turn = previous[name]._turn
            listed = {e.attempt_id for route in routes.values() for e in route.endpoints}
            self._down = {attempt: until for attempt, until in self._down.items() if attempt in listed}
            self._routes, self._read_at = routes, time.monotonic()


def build_routes(rows: list[Any]) -> dict[str, ServiceRoute]:
    """Rows of ``serving_table`` (one per service and replica) → each service's route."""
    by_name: dict[str, tuple[Any, list[Any]]] = {}
    for row in rows:
        entry = by_name.setdefault(row["name"], (row, []))
        if row["job_id"] is not None:
            entry[1].append(row)
    routes: dict[str, ServiceRoute] = {}
    for name, (service, replicas) in by_name.items():
        ready = [
            Endpoint(r["attempt_id"], r["job_id"], r["host"], r["port"])
            for r in replicas
            if _in_rotation(r) and not service["deleting"]
        ]
        reason = "" if ready else why_none_ready(name, service, replicas)
        routes[name] = ServiceRoute(name, service["owner"], service["public"], ready, reason)
    return routes


def _in_rotation(replica: Any) -> bool:
    return bool(
        not replica["draining"]
        and replica["attempt_state"] == "RUNNING"
        and replica["ready"]
        and replica["port"] is not None
    )


def why_none_ready(name: str, service: Any, replicas: list[Any]) -> str:
    """What a caller is told when no replica of ``name`` can take a request."""
    if service["deleting"]:
        return f"service {name} is being deleted"
    if service["replicas"] == 0 and not replicas:
        return f"service {name} is scaled to zero replicas; scale it up to call it"
    if not replicas:
        return f"no replica of service {name} has been created yet; try again in a moment"
    details = "; ".join(f"{r['job_id']}: {_replica_state(r)}" for r in replicas[:4])
    more = f"; and {len(replicas) - 4} more" if len(replicas) > 4 else ""
    return f"no replica of service {name} is ready ({len(replicas)} replicas: {details}{more})"


def _replica_state(replica: Any) -> str:
    if replica["draining"]:
        return "draining"
    state = replica["attempt_state"]
    if state is None:
        return f"job {str(replica['job_state']).lower()}, no task running"
    if state != "RUNNING":
        return f"task {state.lower()}"
    return f"not ready: {replica['ready_detail'] or 'no probe has passed yet'}"
