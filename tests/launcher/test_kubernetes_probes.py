"""A service's replica on Kubernetes: its pod carries the spec's probes (valid for the
API server), and the runner records the pod's Ready condition as the attempt's readiness.
The API server is the scriptable fake (fake_kube_api.py); Postgres is real."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from services.launcher.kubernetes.driver import KubernetesDriver
from services.launcher.kubernetes.manifests import ManifestError, pod_manifest
from services.launcher.kubernetes.names import pod_name
from services.launcher.kubernetes.runner import KubernetesRunner
from services.launcher.kubernetes.settings import KubernetesSettings
from shared.db.pool import Database
from shared.ids import new_attempt_id, new_job_id
from shared.service_spec import Probe, ServiceSpec
from tests.launcher import attempts
from tests.launcher.fake_kube_api import FakeKubeApi, running
from tests.launcher.samples import TASK_LAUNCH
from tests.launcher.test_kubernetes_manifests import VERSIONS, validate
from tests.launcher.test_kubernetes_runner import following, until

NODE = "k8s-gpu-1"
SETTINGS = KubernetesSettings(namespace="corral", retry_delay_s=0.05, default_image="busybox:1.36")
SERVICE = ServiceSpec(
    port="http",
    readiness=Probe(path="/v1/models/m", period_s=0.5, timeout_s=2.5, failure_threshold=2),
    liveness=Probe(path="/healthz", port="admin", initial_delay_s=10),
)
LAUNCH = dataclasses.replace(TASK_LAUNCH, ports={"http": [30080], "admin": [30081]}, service=SERVICE)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_replicas_pod_has_the_specs_probes(version: str) -> None:
    container = pod_manifest(LAUNCH, SETTINGS)["spec"]["containers"][0]
    assert container["readinessProbe"] == {
        "httpGet": {"path": "/v1/models/m", "port": 30080},
        "periodSeconds": 1,  # (whole seconds, rounded up)
        "timeoutSeconds": 3,
        "failureThreshold": 2,
        "initialDelaySeconds": 0,
    }
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 30081}
    assert container["livenessProbe"]["initialDelaySeconds"] == 10
    validate(pod_manifest(LAUNCH, SETTINGS), version)
    # Without a readiness probe: ready once the port takes connections; no liveness probe.
    plain = pod_manifest(dataclasses.replace(LAUNCH, service=ServiceSpec(port="http")), SETTINGS)
    container = plain["spec"]["containers"][0]
    assert container["readinessProbe"] == {"tcpSocket": {"port": 30080}, "periodSeconds": 1}
    assert "livenessProbe" not in container
    validate(plain, version)
    # A batch task is not probed.
    assert "readinessProbe" not in pod_manifest(TASK_LAUNCH, SETTINGS)["spec"]["containers"][0]


def test_a_probe_on_a_port_the_task_was_not_given_is_refused() -> None:
    with pytest.raises(ManifestError, match="allocated no port labelled 'admin'"):
        pod_manifest(dataclasses.replace(LAUNCH, ports={"http": [30080]}), SETTINGS)


@pytest.fixture
async def runner(db: Database, kube: FakeKubeApi, tmp_path: Path) -> AsyncIterator[KubernetesRunner]:
    async with (
        ApiClient(Configuration(host=kube.url)) as client,
        KubernetesDriver(client, SETTINGS) as driver,
    ):
        runner = KubernetesRunner(db, driver, log_dir=tmp_path / "logs", node_pattern="^k8s-", stop_grace_s=5)
        await attempts.known_nodes(db, NODE)
        await runner.hold_leases(15)
        yield runner


def ready_condition(ready: bool, reason: str = "") -> dict[str, Any]:
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    if reason:
        condition |= {"reason": reason, "message": "containers with unready status: [task]"}
    return {**running(), "conditions": [condition]}


async def test_the_pods_ready_condition_is_the_attempts_readiness(
    db: Database, kube: FakeKubeApi, runner: KubernetesRunner
) -> None:
    task = {"name": "main", "instances": 1, "command": "serve", "ports": {"http": 1}}
    spec = {"name": "svc", "kind": "service", "service": {"port": "http"}, "tasks": [task]}
    job_id, attempt_id = new_job_id(), new_attempt_id()
    await db.execute(
        "INSERT INTO api.jobs (id, name, username, virtual_cluster, spec, total_gpus, state, generation)"
        " VALUES ($1, 'svc', 'alice', 'default', $2, 0, 'SCHEDULED', 1)",
        job_id,
        spec,
    )
    await db.execute(
        "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no, node_id,"
        " gpu_indices, state, ports) VALUES ($1, $2, 1, 'main', 0, 1, $3, '{}', 'ASSIGNED', $4)",
        attempt_id,
        job_id,
        NODE,
        {"http": [30080]},
    )
    await runner.start_attempt(attempt_id, NODE)
    pod = pod_name(attempt_id)
    assert kube.pods[pod]["spec"]["containers"][0]["readinessProbe"]["tcpSocket"] == {"port": 30080}

    async def readiness() -> tuple[str, bool, str]:
        row = await db.fetchrow(
            "SELECT state, ready, ready_detail FROM launcher.attempts WHERE id = $1", attempt_id
        )
        assert row is not None
        return row["state"], row["ready"], row["ready_detail"]

    async def is_(wanted: tuple[str, bool, str]) -> bool:
        return await readiness() == wanted

    async with following(runner):
        kube.set_status(pod, ready_condition(False, "ContainersNotReady"))
        not_yet = (
            "RUNNING",
            False,
            "the pod's readiness probe does not pass (ContainersNotReady):"
            " containers with unready status: [task]",
        )
        await until(lambda: is_(not_yet), "running, not ready")
        kube.set_status(pod, ready_condition(True))
        await until(lambda: is_(("RUNNING", True, "the pod is Ready (its readiness probe passes)")), "ready")
