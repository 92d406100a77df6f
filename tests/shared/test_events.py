"""The event envelope and the discriminated union."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from shared.events import JobSubmitted, TaskAssigned, event_json_schema, parse_event
from shared.events.jobs import JobSubmittedData, TaskAssignedData


def _submitted() -> JobSubmitted:
    return JobSubmitted(
        source="corral/api",
        subject="job-1",
        data=JobSubmittedData(
            job_id="job-1", name="hello", user="ada", virtual_cluster="default", total_gpus=1
        ),
    )


def test_an_event_survives_the_wire_as_its_own_type() -> None:
    event = _submitted()
    parsed = parse_event(event.model_dump_json())
    assert isinstance(parsed, JobSubmitted)
    assert parsed == event
    assert parsed.specversion == "1.0"
    assert parsed.nats_subject == "corral.job.submitted.job-1"


def test_task_events_route_by_node() -> None:
    event = TaskAssigned(
        source="corral/launcher",
        subject="att-1",
        data=TaskAssignedData(
            attempt_id="att-1",
            job_id="job-1",
            generation=1,
            task_role="main",
            task_index=0,
            node_id="node-7",
            gpu_indices=[0, 1],
        ),
    )
    assert event.nats_subject == "corral.task.assigned.node-7"


@pytest.mark.parametrize(
    ("mutate", "complaint"),
    [
        (lambda d: d.update(type="corral.job.exploded.v1"), "does not match any of the expected tags"),
        (lambda d: d["data"].update(total_gpus="many"), "valid integer"),
        (lambda d: d["data"].update(surprise=1), "Extra inputs are not permitted"),
        (lambda d: d.pop("source"), "Field required"),
    ],
)
def test_invalid_events_are_rejected_with_the_reason(mutate, complaint) -> None:  # type: ignore[no-untyped-def]
    document = json.loads(_submitted().model_dump_json())
    mutate(document)
    with pytest.raises(ValidationError, match=complaint):
        parse_event(json.dumps(document))


def test_garbage_is_rejected() -> None:
    with pytest.raises(ValidationError):
        parse_event(b"\xff not json")


def test_json_schema_names_every_event_type() -> None:
    schema = json.dumps(event_json_schema())
    for event_type in ("corral.job.submitted.v1", "corral.task.exited.v1", "corral.node.registered.v1"):
        assert event_type in schema
