"""The spec's inputs, outputs and service settings: what is accepted, and what is refused
with a message that says what to change."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from shared.jobs import JobSpec

MAIN: dict[str, Any] = {"name": "main", "command": "python serve.py", "ports": {"http": 1}}


def _spec(**fields: Any) -> JobSpec:
    return JobSpec.model_validate({"name": "demo", "tasks": [MAIN], **fields})


def _refusal(**fields: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        _spec(**fields)
    return str(caught.value)


@pytest.mark.parametrize("path", ["../up", "a/../../b", "/etc", "./", "a/./b/..", "a b", "~root"])
def test_an_output_path_that_leaves_the_output_dir_is_refused(path: str) -> None:
    said = _refusal(outputs=[{"name": "model", "path": path}])
    assert "output path" in said


def test_output_paths_are_normalised_and_names_unique() -> None:
    spec = _spec(outputs=[{"name": "model", "path": "ckpt//final/"}])
    assert spec.outputs[0].path == "ckpt/final"
    said = _refusal(outputs=[{"name": "model", "path": "a"}, {"name": "model", "path": "b"}])
    assert "output names must be unique; repeated: model" in said


def test_inputs_land_at_the_tf_serving_layout_unless_given_a_path() -> None:
    spec = _spec(
        inputs=[
            {"model": "mnist@3"},
            {"artifact": "job-01hzy3k6q8w2m4n5p6r7s8t9v0:predictions"},
            {"model": "mnist@latest", "path": "newest"},
        ]
    )
    assert [i.default_path for i in spec.inputs] == [
        "models/mnist/3",
        "artifacts/job-01hzy3k6q8w2m4n5p6r7s8t9v0/predictions",
        "newest",
    ]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"model": "mnist"}, "should match pattern"),
        ({"model": "mnist@0"}, "should match pattern"),
        ({"artifact": "job-x:model"}, "should match pattern"),
        ({}, "exactly one of model"),
        ({"model": "a@1", "artifact": "job-01hzy3k6q8w2m4n5p6r7s8t9v0:m"}, "exactly one of model"),
        ({"model": "a@1", "path": "../x"}, "escapes its directory"),
    ],
)
def test_a_malformed_input_is_refused_saying_why(given: dict[str, str], said: str) -> None:
    assert said in _refusal(inputs=[given])


def test_two_inputs_at_one_path_are_refused() -> None:
    said = _refusal(inputs=[{"model": "a@1", "path": "x"}, {"model": "b@1", "path": "x/y"}])
    assert "two inputs land at input path 'x'" in said


def test_a_service_names_its_port_and_has_one_replica_task() -> None:
    spec = _spec(kind="service", service={"replicas": 2, "port": "http", "readiness": {"path": "/healthz"}})
    assert spec.service is not None
    assert spec.service.replicas == 2
    assert spec.service.readiness is not None
    assert spec.service.readiness.failure_threshold == 3
    assert "needs service" in _refusal(kind="service")
    assert "service settings are for kind: service" in _refusal(service={"port": "http"})
    assert "not a port label of role main" in _refusal(kind="service", service={"port": "grpc"})
    liveness_elsewhere = {"port": "http", "liveness": {"port": "admin"}}
    assert "'admin' is not a port label" in _refusal(kind="service", service=liveness_elsewhere)
    two_instances = {"kind": "service", "service": {"port": "http"}, "tasks": [{**MAIN, "instances": 2}]}
    with pytest.raises(ValidationError, match="one task role of one instance"):
        JobSpec.model_validate({"name": "demo", **two_instances})
    outputs = {"outputs": [{"name": "m", "path": "m"}]}
    assert "a service keeps no outputs" in _refusal(kind="service", service={"port": "http"}, **outputs)
