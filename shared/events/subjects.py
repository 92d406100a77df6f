"""NATS subjects taken from the event types, never typed by hand.

An event type knows its subject prefix (``corral.<entity>.<verb>``, ``subject_prefix``)
and its events go out on the prefix plus their routing key (``Envelope.nats_subject``).
A consumer's filter built from the types it handles cannot drift from what publishers
send: a misspelt type fails at import, where a misspelt string (``corral.job.faild.>``)
is a filter NATS accepts and that silently matches nothing. A whole family of subjects
(``corral.node.>``) is the stream's own declaration (``shared.bus.streams``).
"""

from __future__ import annotations

from shared.events.envelope import Envelope


def subjects_of(*event_types: type[Envelope]) -> tuple[str, ...]:
    """Every event of these types, whatever its key: ``corral.job.failed.>`` for
    ``JobFailed``. In the order given, as a consumer's ``filter_subjects``."""
    return tuple(f"{_prefix(event_type)}.>" for event_type in event_types)


def subject_for(event_type: type[Envelope], key: str) -> str:
    """The events of this type routed by ``key`` (a task event's node):
    ``corral.task.assigned.<node>``."""
    return f"{_prefix(event_type)}.{key}"


def _prefix(event_type: type[Envelope]) -> str:
    if event_type.subject_prefix == Envelope.subject_prefix:
        raise TypeError(f"{event_type.__name__} is not an event type: it has no subject of its own")
    return event_type.subject_prefix
