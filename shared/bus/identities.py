"""Who may do what on the bus: one NATS identity per service, per node, per integrator.

NATS enforces these lists (``corral/local/nats.py`` writes them into the server's
``authorization`` block); a connection without a known user is refused. Each list is
what the service's README says it consumes and produces, and nothing more:

- a service publishes only its own events (its outbox relay takes only its own rows:
  ``shared/outbox/rows.PUBLISHERS``), so the API cannot publish a scheduler decision;
- a node (its agent and exporter share one identity) publishes only its own heartbeats,
  reads only its own assignments, through consumers whose filter is in the API subject
  (NATS checks the two agree, so the node cannot widen it), and answers only its own
  log requests;
- an integrator reads the streams it was given through its own consumers only (never
  another's: pulling from the launcher's durable would steal its work);
- every identity has its own inbox prefix (``_INBOX_<user>``), so nobody can listen in
  on another's replies.

Lifecycle subjects are keyed by job or node, not by tenant, so NATS cannot filter an
integrator's feed by virtual cluster; the API's SSE and webhooks do that.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from shared.artifacts.transport import ALL_NODES as ALL_NODES_ARTIFACTS
from shared.artifacts.transport import node_subjects as artifact_subjects
from shared.bus.streams import ALERTS, JOBS, METRICS, NODES
from shared.dry_run import DRY_RUN_SUBJECT
from shared.events import (
    JobCancelled,
    JobFailed,
    JobPreempted,
    JobSubmitted,
    JobSucceeded,
    NodeDrainRequested,
    NodeTelemetry,
    TaskAssigned,
    TaskOverLimit,
    TaskStopRequested,
    subject_for,
    subjects_of,
)
from shared.interactive.protocol import SUBJECT_PREFIX as INTERACTIVE_PREFIX
from shared.node_logs import LOGS_SUBJECT_PREFIX, logs_subject
from shared.outbox.rows import MAY_PRECEDE

ADMIN = "admin"
SERVICES = ("api", "scheduler", "launcher", "monitor", "alerter")
LIFECYCLE_STREAMS = (JOBS.name, NODES.name, ALERTS.name)
NODE_PREFIX = "node-"
INTEGRATOR_PREFIX = "integrator-"


@dataclass(frozen=True)
class BusPermissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    # May answer requests (NATS ``allow_responses``: publish to the reply subject of a
    # request it received, once, and to nothing else that way).
    answers: bool = False


def inbox_prefix(user: str) -> str:
    return f"_INBOX_{user}"


def node_user(node_id: str) -> str:
    return NODE_PREFIX + node_id


def node_consumers(node_id: str) -> tuple[tuple[str, str], ...]:
    """(durable, filter) of a node agent's consumers on the jobs stream: one filter
    each, so the filter is part of the subject that creates them."""
    return (
        (f"agent-{node_id}", subject_for(TaskAssigned, node_id)),
        (f"agent-{node_id}-stops", subject_for(TaskStopRequested, node_id)),
    )


def _events(*prefixes: str) -> tuple[str, ...]:
    return tuple(f"{prefix}.*" for prefix in prefixes)


def _durable(stream: str, durable: str, only: str | None = None) -> tuple[str, ...]:
    """What using one durable pull consumer takes: creating it (with its one filter
    ``only`` in the subject, which NATS checks against its configuration; a consumer of
    several filters cannot be held to them), its info, fetching, acking."""
    create = f"$JS.API.CONSUMER.CREATE.{stream}.{durable}"
    return (
        create if only is None else f"{create}.{only}",
        f"$JS.API.CONSUMER.INFO.{stream}.{durable}",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}",
        f"$JS.ACK.{stream}.{durable}.>",
    )


def _any_consumer(stream: str) -> tuple[str, ...]:
    """Ephemeral and named consumers of any name on ``stream`` (the API's tails,
    replays and webhook fan-in)."""
    api = "$JS.API.CONSUMER"
    return (
        f"{api}.CREATE.{stream}",
        f"{api}.CREATE.{stream}.>",
        f"{api}.INFO.{stream}.*",
        f"{api}.DELETE.{stream}.*",
        f"{api}.MSG.NEXT.{stream}.*",
        f"$JS.ACK.{stream}.>",
        f"$JS.FC.{stream}.>",
    )


# Every identity may look at the streams' configuration and state.
_COMMON_PUBLISH = ("$JS.API.INFO", "$JS.API.STREAM.INFO.*")


def _with_common(
    user: str, publish: Iterable[str], subscribe: Iterable[str], answers: bool = False
) -> BusPermissions:
    return BusPermissions(
        publish=(*_COMMON_PUBLISH, *publish),
        subscribe=(f"{inbox_prefix(user)}.>", *subscribe),
        answers=answers,
    )


def _stream_admin(stream: str) -> tuple[str, ...]:
    return tuple(f"$JS.API.STREAM.{verb}.{stream}" for verb in ("CREATE", "UPDATE", "DELETE"))


def service_permissions(service: str) -> BusPermissions:
    """The bus identity of a control-plane service (see the module doc)."""
    match service:
        case "api":
            return _with_common(
                service,
                publish=(
                    *_events(
                        "corral.job.submitted",
                        "corral.job.cancelled",
                        "corral.job.cancel_requested",
                        "corral.node.drain_requested",
                        "corral.alert.action_requested",
                        "corral.alert.silence_requested",
                        "corral.alert.rules_requested",
                    ),
                    DRY_RUN_SUBJECT,  # asks the scheduler (request/reply)
                    f"{LOGS_SUBJECT_PREFIX}.*",  # asks a node for its tasks' logs
                    # opens exec and port-forward streams on a node, and sends their input
                    f"{INTERACTIVE_PREFIX}.*.open",
                    f"{INTERACTIVE_PREFIX}.*.in.*",
                    *(s for stream in LIFECYCLE_STREAMS for s in _any_consumer(stream)),
                ),
                subscribe=(f"{INTERACTIVE_PREFIX}.*.out.*",),  # what the streams' tasks say
            )
        case "scheduler":
            return _with_common(
                service,
                publish=(
                    *_events("corral.job.scheduled", "corral.job.preempt_requested"),
                    # What its decisions may overtake, published first by its relay when
                    # still unsent (shared/outbox/rows.MAY_PRECEDE): the same event ids,
                    # so JetStream drops the copy its owner publishes.
                    *_events(*MAY_PRECEDE["scheduler"]),
                    *(
                        f"$JS.API.CONSUMER.DELETE.{stream}.{name}"
                        for stream, name in _RETIRED_SCHEDULER_CONSUMERS
                    ),
                ),
                subscribe=(
                    # wake-ups (core NATS), and the dry-run questions it answers
                    *subjects_of(JobSubmitted, JobSucceeded, JobFailed, JobCancelled, JobPreempted),
                    *NODES.subjects,
                    DRY_RUN_SUBJECT,
                ),
                answers=True,
            )
        case "launcher":
            task_events = ("assigned", "stop_requested", "started", "exited", "over_limit")
            return _with_common(
                service,
                publish=(
                    *_events(*(f"corral.job.{verb}" for verb in _LAUNCHER_JOB_EVENTS)),
                    *_events(*(f"corral.task.{verb}" for verb in task_events)),
                    *_durable(JOBS.name, "launcher"),
                    *_durable(JOBS.name, "kubernetes-runner"),
                    f"{INTERACTIVE_PREFIX}.*.out.*",
                ),
                # The Kubernetes runner answers for the logs, and serves the exec and
                # port-forward streams, of the pod nodes it holds.
                subscribe=(
                    ALL_NODES_ARTIFACTS,  # answers the nodes' uploads and downloads
                    f"{LOGS_SUBJECT_PREFIX}.*",
                    f"{INTERACTIVE_PREFIX}.*.open",
                    f"{INTERACTIVE_PREFIX}.*.in.*",
                ),
                answers=True,
            )
        case "monitor":
            return _with_common(
                service,
                publish=(
                    *_events(
                        *(
                            f"corral.node.{verb}"
                            for verb in ("registered", "unreachable", "drained", "undrained")
                        )
                    ),
                    *_durable(NODES.name, "monitor-node-commands", *subjects_of(NodeDrainRequested)),
                    # The metrics stream is in memory: after a NATS restart the monitor,
                    # its reader, makes it again.
                    *_stream_admin(METRICS.name),
                ),
                subscribe=subjects_of(NodeTelemetry),
            )
        case "alerter":
            return _with_common(
                service,
                publish=(
                    *_events("corral.alert.firing", "corral.alert.changed"),
                    *_durable(JOBS.name, "alerter-jobs", *subjects_of(JobFailed)),
                    *_durable(JOBS.name, "alerter-tasks", *subjects_of(TaskOverLimit)),
                    *_durable(NODES.name, "alerter-nodes"),
                    *_durable(ALERTS.name, "alerter-actions"),
                ),
                subscribe=(),
            )
    raise ValueError(f"unknown service {service!r}; services are {', '.join(SERVICES)}")


_LAUNCHER_JOB_EVENTS = ("running", "succeeded", "failed", "cancelled", "retrying", "preempted")
_RETIRED_SCHEDULER_CONSUMERS = ((JOBS.name, "scheduler-jobs"), (NODES.name, "scheduler-nodes"))


def node_permissions(node_id: str) -> BusPermissions:
    """A node's identity (its agent and its exporter): its own heartbeats, assignments,
    stop requests, log questions and interactive streams, nothing of any other node."""
    return _with_common(
        node_user(node_id),
        publish=(
            f"corral.metrics.node.{node_id}",
            *(s for durable, only in node_consumers(node_id) for s in _durable(JOBS.name, durable, only)),
            f"{INTERACTIVE_PREFIX}.{node_id}.out.*",
            artifact_subjects(node_id),  # asks the launcher for its tasks' inputs and outputs
        ),
        subscribe=(
            logs_subject(node_id),
            f"{INTERACTIVE_PREFIX}.{node_id}.open",
            f"{INTERACTIVE_PREFIX}.{node_id}.in.*",
        ),
        answers=True,
    )


def integrator_permissions(name: str, streams: Iterable[str]) -> BusPermissions:
    """Read-only: one consumer per stream, named after the integrator, any filter."""
    user = INTEGRATOR_PREFIX + name
    publish: list[str] = []
    for stream in streams:
        if stream not in LIFECYCLE_STREAMS:
            raise ValueError(f"unknown stream {stream!r}; streams are {', '.join(LIFECYCLE_STREAMS)}")
        api = "$JS.API.CONSUMER"
        publish += [
            f"{api}.CREATE.{stream}.{user}",
            f"{api}.CREATE.{stream}.{user}.>",
            f"{api}.INFO.{stream}.{user}",
            f"{api}.DELETE.{stream}.{user}",
            f"{api}.MSG.NEXT.{stream}.{user}",
            f"$JS.ACK.{stream}.{user}.>",
        ]
    return _with_common(user, publish=publish, subscribe=())


ADMIN_PERMISSIONS = BusPermissions(publish=(">",), subscribe=(">",), answers=True)
