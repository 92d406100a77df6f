"""The Kubernetes driver against a real cluster: only when ``KUBECONFIG`` is set.

Runs one CPU-only task (``busybox`` unless ``CORRAL_KUBERNETES_TEST_IMAGE`` names
another) on the first ready node, in ``CORRAL_KUBERNETES_TEST_NAMESPACE`` (default
``default``), and checks what the fake API server cannot: that the manifests are
accepted by a real API server, that the kubelet's statuses map to the right ending,
that logs come back, and that deleting the job's Service garbage-collects its pods.
A kind or minikube cluster is enough.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api

from services.launcher.drivers import TaskLaunch, TaskObserved
from services.launcher.kubernetes.driver import KubernetesDriver
from services.launcher.kubernetes.log_files import Cursor, Splicer
from services.launcher.kubernetes.settings import KubernetesSettings
from shared.ids import new_attempt_id, new_job_id

pytestmark = pytest.mark.skipif(
    not os.environ.get("KUBECONFIG"),
    reason="needs a real Kubernetes cluster: set KUBECONFIG to run it (kind or minikube will do)",
)
NAMESPACE = os.environ.get("CORRAL_KUBERNETES_TEST_NAMESPACE", "default")
IMAGE = os.environ.get("CORRAL_KUBERNETES_TEST_IMAGE", "busybox:1.36")


@pytest.fixture
async def client() -> AsyncIterator[ApiClient]:
    configuration = Configuration()
    await config.load_kube_config(client_configuration=configuration)
    async with ApiClient(configuration) as api_client:
        yield api_client


async def ready_node(client: ApiClient) -> str:
    nodes = await CoreV1Api(client).list_node()
    for node in nodes.items:
        if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []):
            return str(node.metadata.name)
    pytest.skip("the cluster has no ready node")


@pytest.mark.timeout(300)
async def test_a_task_runs_reports_its_exit_and_logs_and_is_cleaned_up(client: ApiClient) -> None:
    settings = KubernetesSettings(namespace=NAMESPACE, keep_finished_s=0, retry_delay_s=0.5)
    driver = KubernetesDriver(client, settings)
    attempt = new_attempt_id()
    launch = TaskLaunch(
        attempt_id=attempt,
        job_id=new_job_id(),
        generation=1,
        task_role="main",
        task_index=0,
        attempt_no=1,
        node_id=await ready_node(client),
        command='echo "hello from $CORRAL_TASK_ROLE"; exit 3',
        env={"CORRAL_TASK_ROLE": "main"},
        gpu_indices=(),
        gpus=0,
        cpus=0.1,
        memory_mb=64,
        image=IMAGE,
        max_runtime_s=600,
    )
    watch = driver.watch()
    try:
        await driver.start(launch)
        await driver.start(launch)  # idempotent against a real API server too
        deadline = time.monotonic() + 240
        ended: TaskObserved | None = None
        while ended is None and time.monotonic() < deadline:
            observed = await asyncio.wait_for(anext(watch), deadline - time.monotonic())
            if observed.attempt_id == attempt and observed.ended is not None:
                ended = observed
        assert ended is not None
        assert ended.ended is not None
        assert ended.ended.exit_code == 3, ended.ended.reason
        output = b"".join([chunk async for chunk in await driver.logs(attempt, follow=True)])
        assert b"hello from main" in output
        # What the runner follows into the attempt's file: the kubelet's timestamped lines,
        # spliced to the same text, and nothing twice when resumed from where it ended.
        splicer = Splicer(Cursor())
        stamped = b"".join([chunk async for chunk in driver.follow_log(attempt, None, 1.0)])
        assert (splicer.feed(stamped), splicer.unstamped) == (output, 0)
        resumed = Splicer(splicer.cursor)
        since = splicer.cursor.since()
        assert (
            resumed.feed(b"".join([chunk async for chunk in driver.follow_log(attempt, since, 1.0)])) == b""
        )
    finally:
        await watch.aclose()
        assert await driver.reconcile(set()) == set()  # deletes the job's Service, and its pod
        await driver.close()  # its log streams' own client
