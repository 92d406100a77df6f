"""``GET /api/v1/events``: lifecycle events as server-sent events (SSE).

Each SSE message is one event: ``event:`` its type, ``data:`` the CloudEvents document
exactly as it is on NATS, ``id:`` a cursor (``hub.Cursor``). A client that
reconnects with ``Last-Event-ID`` (browsers' ``EventSource`` does so by itself; or
``?last_event_id=``) gets every event it missed, in order, and nothing twice; without
one it starts from now. A comment line every ``CORRAL_API_SSE_KEEPALIVE_S`` keeps
proxies from closing an idle stream and lets a client notice a dead one. Every
``CORRAL_API_SSE_REAUTH_S`` the stream checks its token again: one revoked or expired, or
whose user was deleted or changed role, ends it (with a ``: closed:`` comment).

Filters: ``type`` (repeatable; ``corral.job.failed.v1`` or a prefix ``corral.job.*``),
``job`` and ``virtual_cluster`` (repeatable); visibility as in ``scope.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from services.api.dependencies import SettingsDep
from services.api.events.dependencies import MaybeHub
from services.api.events.hub import LIFECYCLE, Cursor, EventHub, StreamEvent
from services.api.events.scope import EventFacts, EventFilter, check_type_patterns
from services.api.tenants.auth import AuthenticatedPrincipal, still_stands_for
from shared.errors import TransientError
from shared.jobs import NAME_PATTERN

router = APIRouter(prefix="/api/v1/events", tags=["events"])
# The last words of a stream whose token no longer holds (``sse``).
STREAM_REVOKED = (
    b": closed: the token of this stream was revoked or expired, or its user was deleted or"
    b" changed role; reconnect with a valid token\n\n"
)
JOB_ID = r"^job-[0-9a-z]{1,40}$"
READY_TIMEOUT_S = 5.0


@router.get(
    "",
    operation_id="streamEvents",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "an endless SSE stream"}},
)
async def stream_events(
    request: Request,
    principal: AuthenticatedPrincipal,
    hub: MaybeHub,
    settings: SettingsDep,
    type: Annotated[
        list[str] | None, Query(max_length=50, description="event types, or prefixes such as corral.job.*")
    ] = None,
    job: Annotated[list[Annotated[str, Query(pattern=JOB_ID)]] | None, Query(max_length=100)] = None,
    virtual_cluster: Annotated[
        list[Annotated[str, Query(pattern=NAME_PATTERN)]] | None, Query(max_length=50)
    ] = None,
    last_event_id: Annotated[str | None, Query(max_length=100, description="as the header")] = None,
    last_event_id_header: Annotated[str | None, Header(alias="Last-Event-ID", max_length=100)] = None,
) -> StreamingResponse:
    """Follow lifecycle events as they happen (yours; every event for admins)."""
    if hub is None:
        raise TransientError("this API serves no event stream (no message bus); try again later")
    wanted = EventFilter(
        check_type_patterns([t.strip() for t in type or []], principal.is_admin),
        frozenset(job or []),
        frozenset(virtual_cluster or []),
    )
    resume = last_event_id_header or last_event_id
    cursor = Cursor.parse(resume) if resume else None
    if not await hub.wait_ready(READY_TIMEOUT_S):
        raise TransientError("the event stream is starting; try again in a moment")
    username, is_admin = principal.username, principal.is_admin

    def wants(facts: EventFacts) -> bool:
        return facts.visible_to(username, is_admin) and wanted.matches(facts)

    async def still_allowed() -> bool:
        return await still_stands_for(request, principal)

    return StreamingResponse(
        sse(hub, wants, cursor, settings.sse_keepalive_s, still_allowed, settings.sse_reauth_s),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def frame(event: StreamEvent, cursor: Cursor) -> bytes:
    return f"id: {cursor.encode()}\n".encode() + _body(event.payload, event.facts.type)


@functools.lru_cache(maxsize=1024)
def _body(payload: bytes, event_type: str) -> bytes:
    """An event's ``event:`` and ``data:`` lines, the same for every subscriber: made once
    per event, not once per stream (the payload is one bytes object, its hash cached)."""
    lines = [f"event: {event_type}"]
    lines += [f"data: {line}" for line in payload.decode("utf-8", "replace").splitlines()]
    return ("\n".join(lines) + "\n\n").encode()


async def sse(
    hub: EventHub,
    wants: Callable[[EventFacts], bool],
    cursor: Cursor | None,
    keepalive_s: float,
    still_allowed: Callable[[], Awaitable[bool]] | None = None,
    reauth_s: float = math.inf,
) -> AsyncGenerator[bytes, None]:
    """The stream of one connection: catch up from JetStream, then follow the hub; every
    ``reauth_s`` ask ``still_allowed``, and end the stream when the token no longer holds
    (checked at the latest a keep-alive interval late)."""
    yield b"retry: 2000\n: connected\n\n"
    loop = asyncio.get_running_loop()
    check_at = loop.time() + reauth_s
    while True:  # once per (re)registration: a subscriber that fell behind catches up again
        subscriber = hub.register(wants)
        try:
            cursor = cursor or subscriber.start
            for stream in range(len(LIFECYCLE)):
                after, until = cursor.positions[stream], subscriber.start.positions[stream]
                if after >= until:
                    continue
                oldest = await hub.oldest_kept(stream)
                if after + 1 < oldest:
                    name = LIFECYCLE[stream].name
                    yield f": events of {name} before sequence {oldest} are no longer kept\n\n".encode()
                async with contextlib.aclosing(hub.replay(stream, after, until)) as missed:
                    async for event in missed:
                        cursor = cursor.advanced(stream, event.seq)
                        if wants(event.facts):
                            yield frame(event, cursor)
                cursor = cursor.advanced(stream, until)
            while True:
                batch = await subscriber.next_batch(keepalive_s)
                if still_allowed is not None and loop.time() >= check_at:
                    if not await still_allowed():
                        yield STREAM_REVOKED
                        return
                    check_at = loop.time() + reauth_s
                if subscriber.overflowed:
                    break
                if not batch:
                    yield b": keep-alive\n\n"
                    continue
                frames = []
                for live in batch:
                    if live.seq <= cursor.positions[live.stream]:
                        continue  # already sent during the catch-up
                    cursor = cursor.advanced(live.stream, live.seq)
                    frames.append(frame(live, cursor))
                if frames:
                    yield b"".join(frames)  # one write for all that queued up
        finally:
            hub.unregister(subscriber)
