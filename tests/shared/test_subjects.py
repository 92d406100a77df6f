"""Subjects from event types (``shared/events/subjects.py``), and every subject a service
consumes or watches names events that exist: a misspelt filter is a consumer NATS
accepts and that silently receives nothing, so it must fail here instead."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from types import ModuleType
from typing import get_args

import pytest

import services.alerter
import services.launcher
import services.monitor
import services.scheduler
from services.launcher.agent.app import assignments_consumers
from services.monitor.app import HEARTBEAT_SUBJECT
from services.scheduler.wakeups import WAKING_SUBJECTS
from shared.bus import ConsumerConfig
from shared.bus.streams import STREAMS
from shared.events import Envelope, Event, JobFailed, NodeRegistered, TaskAssigned, subject_for, subjects_of

# The services whose consumers are module constants (the API builds its own per
# integrator, from the streams it was given).
SERVICES: tuple[ModuleType, ...] = (services.scheduler, services.launcher, services.monitor, services.alerter)


def _event_types() -> list[type[Envelope]]:
    return list(get_args(get_args(Event)[0]))


def _overlap(a: list[str], b: list[str]) -> bool:
    """Whether some subject matches both NATS patterns (``*`` one token, ``>`` the rest)."""
    for x, y in zip(a, b, strict=False):
        if ">" in (x, y):
            return True
        if x != y and "*" not in (x, y):
            return False
    return len(a) == len(b)


def _events_matching(subject: str) -> list[str]:
    """The event types a filter or subscription on ``subject`` receives."""
    tokens = subject.split(".")
    return [t.__name__ for t in _event_types() if _overlap(tokens, [*t.subject_prefix.split("."), "*"])]


def _in_stream(subject: str, stream: str) -> bool:
    spec = next(s for s in STREAMS if s.name == stream)
    return any(_overlap(subject.split("."), pattern.split(".")) for pattern in spec.subjects)


def _modules(package: ModuleType) -> Iterator[ModuleType]:
    yield package
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        if not info.name.endswith("__main__"):
            yield importlib.import_module(info.name)


def _consumers() -> dict[str, ConsumerConfig]:
    """Every consumer the services declare, by durable name (module constants, and a
    node agent's, which are made per node)."""
    found = {
        value.durable: value
        for package in SERVICES
        for module in _modules(package)
        for value in vars(module).values()
        if isinstance(value, ConsumerConfig)
    }
    found |= {consumer.durable: consumer for consumer in assignments_consumers("node-1")}
    return found


def test_subjects_come_from_the_event_types() -> None:
    assert subjects_of(JobFailed, NodeRegistered) == ("corral.job.failed.>", "corral.node.registered.>")
    assert subject_for(TaskAssigned, "node-1") == "corral.task.assigned.node-1"
    with pytest.raises(TypeError, match="not an event type"):
        subjects_of(Envelope)


def test_a_misspelt_subject_matches_no_event() -> None:
    assert _events_matching("corral.job.failed.>") == ["JobFailed"]
    assert _events_matching("corral.job.faild.>") == []
    assert _events_matching("corral.node.drained") == []  # no key: no event has that subject
    assert "NodeDrained" in _events_matching("corral.node.>")


def test_every_consumer_of_the_services_receives_events_of_its_stream() -> None:
    consumers = _consumers()
    assert {"launcher", "kubernetes-runner", "monitor-node-commands", "alerter-jobs", "alerter-nodes"} <= set(
        consumers
    )  # the walk found them: an empty walk would pass anything
    unmatched = [
        (name, subject)
        for name, consumer in consumers.items()
        for subject in consumer.filter_subjects
        if not _events_matching(subject) or not _in_stream(subject, consumer.stream)
    ]
    assert not unmatched, f"consumer filters that receive no event of their stream: {unmatched}"


def test_what_the_services_watch_and_listen_to_are_events() -> None:
    watched = [*WAKING_SUBJECTS, HEARTBEAT_SUBJECT]
    assert [s for s in watched if not _events_matching(s)] == []
    assert _events_matching(HEARTBEAT_SUBJECT) == ["NodeTelemetry"]
