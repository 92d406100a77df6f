"""What an event is about, who may see it, and whether it matches a subscriber's filter.

Both integrator feeds use this module — the SSE stream (``routes.py``) and webhooks
(``webhooks/fan_in.py``) — so a user sees the same events through either, and
the same filter words (``type``, ``job``, ``virtual_cluster``) mean the same thing.

Visibility follows the rest of the API: an admin sees every event; a user sees the
events of their own jobs (job and task events), the alerts about their own jobs (as
``GET /api/v1/alerts`` shows them), and node events (``GET /api/v1/nodes`` is open to
every user). Requests recorded for a service (drain, acknowledge, silence, rules) are
for admins only.

Events name their job (``data.job_id``) but not its owner or VC. ``Scopes`` looks those
up in ``api.jobs`` once per job and keeps them: they never change, so the cache needs no
invalidation, and a ``job.submitted`` event (which carries both) fills it for free.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal, get_args

from services.api.events.repository import EventRepository
from shared.errors import InvalidInput
from shared.events import Event

log = logging.getLogger(__name__)

Audience = Literal["owner", "everyone", "admins"]


def _known_types() -> tuple[str, ...]:
    union = get_args(Event)[0]
    return tuple(sorted(str(member.model_fields["type"].default) for member in get_args(union)))


KNOWN_TYPES = _known_types()
# Telemetry is not a lifecycle event: it is never on the integrators' feeds.
FEED_TYPES = tuple(t for t in KNOWN_TYPES if not t.startswith("corral.metrics."))
_PUBLIC_NODE_EVENTS = ("registered", "unreachable", "drained", "undrained")


@dataclass(frozen=True)
class EventFacts:
    """What filters and visibility need to know of one event."""

    type: str
    job_id: str | None
    owner: str | None
    virtual_cluster: str | None
    audience: Audience

    def visible_to(self, username: str, is_admin: bool) -> bool:
        if is_admin or self.audience == "everyone":
            return True
        return self.audience == "owner" and self.owner is not None and self.owner == username


def audience_of(event_type: str) -> Audience:
    entity, _, rest = event_type.removeprefix("corral.").partition(".")
    verb = rest.split(".")[0]
    if entity in ("job", "task"):
        return "owner"
    if entity == "alert" and verb in ("firing", "changed"):
        return "owner"
    if entity == "node" and verb in _PUBLIC_NODE_EVENTS:
        return "everyone"
    return "admins"


def check_type_patterns(patterns: list[str], is_admin: bool) -> tuple[str, ...]:
    """Event types a subscriber asked for: exact names (``corral.job.failed.v1``) or a
    prefix ending in ``*`` (``corral.job.*``). ``InvalidInput`` names what matches no
    event type, or only types this user may never see."""
    for pattern in patterns:
        matched = [t for t in FEED_TYPES if type_matches(pattern, t)]
        if not matched:
            raise InvalidInput(
                f"unknown event type {pattern!r}; give a type such as corral.job.failed.v1 or a prefix"
                f" such as corral.job.* (types: {', '.join(FEED_TYPES)})"
            )
        if not is_admin and all(audience_of(t) == "admins" for t in matched):
            raise InvalidInput(f"only an admin may receive {pattern!r} events")
    return tuple(dict.fromkeys(patterns))


def type_matches(pattern: str, event_type: str) -> bool:
    if pattern.endswith("*"):
        return event_type.startswith(pattern[:-1])
    return pattern == event_type


@dataclass(frozen=True)
class EventFilter:
    """Empty parts match everything; the parts given must all match."""

    types: tuple[str, ...] = ()
    jobs: frozenset[str] = frozenset()
    virtual_clusters: frozenset[str] = frozenset()

    def matches(self, facts: EventFacts) -> bool:
        if self.types and not any(type_matches(p, facts.type) for p in self.types):
            return False
        if self.jobs and facts.job_id not in self.jobs:
            return False
        return not self.virtual_clusters or facts.virtual_cluster in self.virtual_clusters


class Scopes:
    """Reads the facts of raw events; owners and VCs of jobs cached (bounded, LRU)."""

    def __init__(self, repo: EventRepository, max_entries: int = 100_000) -> None:
        self._repo = repo
        self._max = max_entries
        self._jobs: OrderedDict[str, tuple[str, str] | None] = OrderedDict()
        self._alert_jobs: OrderedDict[str, str | None] = OrderedDict()

    async def facts(self, payload: bytes) -> EventFacts | None:
        """None for what is not a JSON event (nothing to show anyone)."""
        try:
            document = json.loads(payload)
            event_type = str(document["type"])
            data: Any = document.get("data") or {}
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(data, dict):
            return None
        job_id = data.get("job_id")
        if event_type.startswith("corral.job.submitted."):
            self._remember(self._jobs, str(job_id), (str(data.get("user")), str(data.get("virtual_cluster"))))
        if event_type.startswith("corral.alert."):
            job_id = await self._job_of_alert(data)
        if not isinstance(job_id, str):
            return EventFacts(event_type, None, None, None, audience_of(event_type))
        owner, vc = await self._job_scope(job_id) or (None, None)
        return EventFacts(event_type, job_id, owner, vc, audience_of(event_type))

    async def _job_scope(self, job_id: str) -> tuple[str, str] | None:
        if job_id in self._jobs:
            self._jobs.move_to_end(job_id)
            return self._jobs[job_id]
        scope = await self._repo.job_scope(job_id)
        if scope is not None:  # a job not (yet) seen is not remembered as nobody's
            self._remember(self._jobs, job_id, scope)
        return scope

    async def _job_of_alert(self, data: dict[str, Any]) -> str | None:
        labels = data.get("labels")
        alert_id = str(data.get("alert_id", ""))
        if isinstance(labels, dict):  # alert.firing carries its labels
            job = labels.get("job")
            self._remember(self._alert_jobs, alert_id, job if isinstance(job, str) else None)
            return job if isinstance(job, str) else None
        if alert_id in self._alert_jobs:
            return self._alert_jobs[alert_id]
        job_id = await self._repo.alert_job(alert_id)
        self._remember(self._alert_jobs, alert_id, job_id)
        return job_id

    def _remember(self, cache: OrderedDict[str, Any], key: str, value: Any) -> None:
        cache[key] = value
        cache.move_to_end(key)
        if len(cache) > self._max:
            cache.popitem(last=False)
