"""The PodMonitor: it matches prometheus-operator's CRD, and Prometheus scrapes every
Corral process where that process serves ``/metrics``, and nothing else.

The PodMonitor is no built-in kind: it is validated by the pydantic model generated from
prometheus-operator's CRD (``cloudcoil-models-prometheus-operator``), and as those models
ignore unknown fields, a round trip checks that none was dropped.
"""

from __future__ import annotations

import dataclasses
import importlib
import re

import pytest
from pydantic import BaseModel, ValidationError

from corral.local.stack_config import SERVICES
from services.launcher.kubernetes.manifests import pod_manifest
from services.launcher.kubernetes.settings import KubernetesSettings
from shared.service import Health, health_routes
from tests.deploy.render import (
    OVERLAYS,
    Obj,
    container_env,
    containers,
    of_kind,
    render,
    service_of,
    workloads,
)
from tests.launcher.samples import TASK_LAUNCH


def podmonitor_model() -> type[BaseModel]:
    # Imported by name: the generated module is 2 MB of models, kept out of mypy's way.
    module = importlib.import_module("cloudcoil.models.prometheus_operator.v1")
    model: type[BaseModel] = module.PodMonitor
    return model


@pytest.mark.slow
def test_podmonitor_matches_its_crd() -> None:
    model = podmonitor_model()
    monitors = of_kind(render("production"), "PodMonitor")
    assert len(monitors) == 1
    for monitor in monitors:
        parsed = model.model_validate(monitor)
        assert parsed.model_dump(by_alias=True, exclude_unset=True, mode="json") == monitor, (
            "a field the CRD does not know was dropped"
        )
    assert of_kind(render("dev"), "PodMonitor") == []  # no Prometheus Operator CRD on a laptop


@pytest.mark.slow
def test_the_crd_check_refuses_what_the_crd_refuses() -> None:
    model = podmonitor_model()
    (monitor,) = of_kind(render("production"), "PodMonitor")
    no_selector = {**monitor, "spec": {k: v for k, v in monitor["spec"].items() if k != "selector"}}
    with pytest.raises(ValidationError, match="selector"):
        model.model_validate(no_selector)
    endpoints = monitor["spec"]["podMetricsEndpoints"]
    typo = {**monitor, "spec": {**monitor["spec"], "podMetricEndpoints": endpoints}}
    assert model.model_validate(typo).model_dump(by_alias=True, exclude_unset=True, mode="json") != typo


# --- Prometheus scrapes every Corral process ------------------------------------------


def podmonitor() -> Obj:
    (monitor,) = of_kind(render("production"), "PodMonitor")
    return monitor


def selected(monitor: Obj, labels: dict[str, str]) -> bool:
    selector = monitor["spec"]["selector"]
    assert set(selector) == {"matchLabels"}, "a selector these tests do not evaluate"
    return bool(selector["matchLabels"].items() <= labels.items())


def metrics_port(objects: list[Obj], container: Obj) -> int:
    """Where a container's process serves /metrics: beside /healthz, so the API on its
    own port and every other service on its health port."""
    prefix = "CORRAL_API_" if service_of(container) == "api" else "CORRAL_HEALTH_"
    return int(container_env(objects, container)[prefix + "PORT"]["value"])


def test_the_health_port_serves_metrics() -> None:
    # What metrics_port relies on for the background services (the API's own /metrics
    # and every service's answer are tests/e2e/test_observability.py's).
    paths = [route.path for route in health_routes(Health("scheduler"))]
    assert "/metrics" in paths


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_prometheus_scrapes_every_corral_process(overlay: str) -> None:
    """The PodMonitor (the component production includes; an overlay with the node
    agent would include the same) over each overlay's pods: every container of every
    workload is a target at the port where its service serves /metrics, and no target
    is a port that serves none."""
    monitor = podmonitor()
    endpoints = {e["port"]: e for e in monitor["spec"]["podMetricsEndpoints"]}
    assert {e["path"] for e in endpoints.values()} == {"/metrics"}
    objects = render(overlay)
    scraped = []
    for obj in workloads(objects):
        name = obj["metadata"]["name"]
        pod = obj["spec"]["template"]
        assert selected(monitor, pod["metadata"]["labels"]), f"{overlay}: the PodMonitor skips {name}'s pods"
        for container in containers(obj):
            what = f"{overlay} {name}/{container['name']}"
            port = metrics_port(objects, container)
            declared = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
            targets = {n: number for n, number in declared.items() if n in endpoints}
            # Exactly one target per process, at its /metrics (a second would be a 404).
            assert list(targets.values()) == [port], (
                f"{what}: scraped at {targets}, serves /metrics on {port}"
            )
            scraped.append(service_of(container))
    expected = {name for name, _ in SERVICES} - (set() if overlay == "dev" else {"agent"})
    assert sorted(scraped) == sorted(expected)


def test_each_service_is_its_own_prometheus_job() -> None:
    """jobLabel names each target's job by its workload (the dashboard selects
    job="corral-monitor" for the GPU series): every pod has the label, each value once."""
    label = podmonitor()["spec"]["jobLabel"]
    for overlay in OVERLAYS:
        jobs = [obj["spec"]["template"]["metadata"]["labels"][label] for obj in workloads(render(overlay))]
        assert len(jobs) == len(set(jobs)), overlay
        assert all(re.fullmatch(r"corral-[a-z]+", job) for job in jobs), jobs
        assert "corral-monitor" in jobs


def test_task_pods_are_not_scraped() -> None:
    # A job's pod runs the job's image: whatever it serves is not Corral's to scrape, even
    # on a port the PodMonitor names.
    launch = dataclasses.replace(TASK_LAUNCH, ports={"http": [8080]})
    pod = pod_manifest(launch, KubernetesSettings(namespace="corral"))
    assert not selected(podmonitor(), pod["metadata"]["labels"])
