"""``/live/{view}``: tells an open page when what it shows has changed, at most once a
``CORRAL_API_PORTAL_LIVE_INTERVAL_S`` (an overview: once a
``CORRAL_API_PORTAL_OVERVIEW_INTERVAL_S``).

Why not poll, and why not push rendered HTML: OpenPAI's job pages each polled the REST
server every 10 s and a few hundred open tabs took it down, busy or not. Here a page
holds one server-sent-events connection (htmx's SSE extension) fed by the API process's
one tail of the lifecycle streams (``events/hub.py``): an open tab costs a dictionary
entry and nothing at all while nothing happens. When events the page can see arrive, the
stream sends one ``changed`` message, however many events came in that interval, and
the page's panels fetch themselves again (``hx-trigger="sse:changed"``) through the
same route that rendered them: so a page's live state and first state are rendered by
one piece of code, and a hundred tabs of a quiet cluster cost nothing.

Views, what wakes them (each filtered by what the user may see, ``scope.py``) and how
often at most (``RULES``):
- ``jobs``: any event of a job the user can see (the job list), once a second;
- ``job?job=ID``: that job's events, once a second. Its page stops following once the
  job has finished: the panel fetched after its last event comes without the connection;
- ``alerts``: alert events, once a second;
- ``nodes``: node and alert events (a drain, a GPU gone bad), once a second. Job events
  do not wake it: a heat map of thousands of GPUs is the dearest panel to render, and
  which GPUs are held shows with the telemetry refresh;
- ``services``: events of the jobs the user can see (a replica is a job), once a second;
  also every telemetry interval, for readiness and request rates, which are not events;
- ``cluster``: every event (home, virtual clusters), at most once an overview interval:
  their panels aggregate the whole cluster, and on a busy one something changes every
  second.
GPU utilisation is telemetry, not a lifecycle event, so ``nodes`` and ``cluster`` pages
are also told to refresh every ``CORRAL_API_PORTAL_TELEMETRY_REFRESH_S``.

Nothing is missed between a page's render and its connection: the page passes the hub's
position when it was rendered (``?after=``, set by ``rendering.render``), and a stream
whose tails have read further by the time it registers sends one ``changed`` at once.

A session that no longer holds ends the stream (checked every ``sse_reauth_s``); the
browser's reconnect then gets the sign-in redirect.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from services.api.dependencies import SettingsDep
from services.api.events.dependencies import MaybeHub
from services.api.events.hub import Cursor, EventHub
from services.api.events.scope import EventFacts
from services.api.portal.dependencies import PortalSessions, SignedIn
from services.api.portal.errors import PortalRoute
from shared.errors import InvalidInput, TransientError

router = APIRouter(route_class=PortalRoute, include_in_schema=False)

View = Literal["jobs", "job", "alerts", "nodes", "services", "cluster"]
JOB_ID = r"^job-[0-9a-z]{1,40}$"
READY_TIMEOUT_S = 5.0
CHANGED = b"event: changed\ndata: changed\n\n"


@dataclass(frozen=True)
class Rule:
    """What wakes a view, and how often at most."""

    prefixes: tuple[str, ...]  # the event types that wake it
    overview: bool = False  # at most once an overview interval, not a live one
    telemetry: bool = False  # also refreshed every telemetry interval


RULES: dict[str, Rule] = {
    "jobs": Rule(("corral.job.", "corral.task.")),
    "job": Rule(("corral.job.", "corral.task.", "corral.alert.")),
    "alerts": Rule(("corral.alert.",)),
    "nodes": Rule(("corral.node.", "corral.alert."), telemetry=True),
    "services": Rule(("corral.job.", "corral.task."), telemetry=True),
    "cluster": Rule(
        ("corral.job.", "corral.task.", "corral.node.", "corral.alert."), overview=True, telemetry=True
    ),
}


@dataclass(frozen=True)
class Pace:
    """How often a stream may speak: ``interval_s`` between two ``changed`` at least, one
    every ``refresh_s`` regardless, a keep-alive after ``keepalive_s`` of quiet, the
    session checked every ``reauth_s``."""

    interval_s: float
    refresh_s: float
    keepalive_s: float
    reauth_s: float


@router.get("/live/{view}")
async def live(
    request: Request,
    view: View,
    user: SignedIn,
    sessions: PortalSessions,
    hub: MaybeHub,
    settings: SettingsDep,
    job: Annotated[str | None, Query(pattern=JOB_ID)] = None,
    after: Annotated[str | None, Query(max_length=100, description="the hub's position at render")] = None,
) -> StreamingResponse:
    if hub is None:
        raise TransientError(
            "this API serves no live updates (no message bus); reload the page to refresh it"
        )
    if view == "job" and job is None:
        raise InvalidInput("the job view follows one job: give ?job=<id>")
    rendered_at = Cursor.parse(after) if after else None
    if not await hub.wait_ready(READY_TIMEOUT_S):
        raise TransientError("live updates are starting; reload in a moment")
    rule = RULES[view]
    username, is_admin = user.principal.username, user.principal.is_admin

    def wants(facts: EventFacts) -> bool:
        if not facts.type.startswith(rule.prefixes) or not facts.visible_to(username, is_admin):
            return False
        return job is None or facts.job_id == job

    async def still_signed_in() -> bool:
        try:
            return (await sessions.user(request)).principal == user.principal
        except Exception:  # any refusal means the same: stop following
            return False

    pace = Pace(
        settings.portal_overview_interval_s if rule.overview else settings.portal_live_interval_s,
        settings.portal_telemetry_refresh_s if rule.telemetry else math.inf,
        settings.sse_keepalive_s,
        settings.sse_reauth_s,
    )
    return StreamingResponse(
        changes(hub, wants, pace, still_signed_in, rendered_at),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def changes(
    hub: EventHub,
    wants: Callable[[EventFacts], bool],
    pace: Pace,
    still_allowed: Callable[[], Awaitable[bool]],
    rendered_at: Cursor | None = None,
) -> AsyncGenerator[bytes, None]:
    """One ``changed`` per burst of wanted events, no two closer than ``pace.interval_s``;
    one at once if the tails read anything since ``rendered_at`` (it may have been wanted:
    one needless refresh is cheaper than a stale page)."""
    loop = asyncio.get_running_loop()
    subscriber = hub.register(wants)
    try:
        yield b"retry: 3000\n: following\n\n"
        missed = rendered_at is not None and any(
            now > then for now, then in zip(subscriber.start.positions, rendered_at.positions, strict=True)
        )
        last_sent = -math.inf if missed else loop.time()
        refresh_at = loop.time() + pace.refresh_s
        check_at = loop.time() + pace.reauth_s
        while True:
            if missed:
                batch, missed = [], False
                due = True
            else:
                wait_s = min(pace.keepalive_s, max(0.0, refresh_at - loop.time()))
                batch = await subscriber.next_batch(wait_s)
                due = bool(batch) or subscriber.overflowed or loop.time() >= refresh_at
            now = loop.time()
            if now >= check_at:
                if not await still_allowed():
                    yield b": closed: the session ended; reload the page to sign in again\n\n"
                    return
                check_at = now + pace.reauth_s
            if not due:
                yield b": keep-alive\n\n"
                continue
            # Coalesce: whatever else arrives before the interval is up rides along.
            await asyncio.sleep(max(0.0, last_sent + pace.interval_s - now))
            subscriber.pending.clear()
            subscriber.overflowed = False
            last_sent = loop.time()
            refresh_at = last_sent + pace.refresh_s
            yield CHANGED
    finally:
        hub.unregister(subscriber)
