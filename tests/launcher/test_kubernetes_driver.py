"""The Kubernetes driver against an in-process fake API server (``fake_kube_api``).

The real kubernetes-asyncio client speaks HTTP to the fake, which keeps pods, services,
resourceVersions and watch streams as the API server does; the tests play the kubelet
by scripting pod status, and check what the launcher would be told.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from services.launcher.drivers import LaunchDriver, TaskEnded, TaskLaunch, TaskObserved
from services.launcher.exit_codes import TaskEnd, classify
from services.launcher.kubernetes.driver import AttemptNotFound, KubernetesDriver
from services.launcher.kubernetes.settings import KubernetesSettings
from tests.launcher.fake_kube_api import FakeKubeApi, running, terminated, waiting

NS = "corral-test"
SETTINGS = KubernetesSettings(
    namespace=NS, retry_delay_s=0.01, log_wait_interval_s=0.01, watch_timeout_s=30, keep_finished_s=3600
)
JOB = "job-01m81scc9vkd1fesxk1gz86zrz"
ENV = {
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
    "WORLD_SIZE": "2",
    "RANK": "1",
    "PAI_TASK_ROLE_LIST": "worker",
    "PAI_TASK_ROLE_TASK_COUNT_worker": "2",
    "PAI_HOST_IP_worker_0": "10.0.0.1",
    "PAI_HOST_IP_worker_1": "10.0.0.2",
    "CUDA_VISIBLE_DEVICES": "2,3",
}


def launch(index: int = 1, attempt: str = "att-01m81sd0000000000000000001", **changes: Any) -> TaskLaunch:
    base = TaskLaunch(
        attempt_id=attempt,
        job_id=JOB,
        generation=1,
        task_role="worker",
        task_index=index,
        attempt_no=1,
        node_id="gpu-node-3",
        command="python train.py",
        env=ENV,
        gpu_indices=(2, 3),
        gpus=2,
        cpus=4.0,
        memory_mb=16384,
        image="pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
        ports={"master": [29500]},
        max_runtime_s=3600,
    )
    return dataclasses.replace(base, **changes)


A1 = "att-01m81sd0000000000000000001"
A2 = "att-01m81sd0000000000000000002"
A3 = "att-01m81sd0000000000000000003"


@pytest.fixture
async def client(kube: FakeKubeApi) -> AsyncIterator[ApiClient]:
    async with ApiClient(Configuration(host=kube.url)) as api_client:
        yield api_client


@pytest.fixture
def driver(client: ApiClient) -> KubernetesDriver:
    return KubernetesDriver(client, SETTINGS)


class Watcher:
    """Consumes ``driver.watch()`` in a task, as the launcher would, into a queue.

    (Cancelling a pending ``anext`` would end the async generator, so waits with a
    timeout happen on the queue, never on the stream.)"""

    def __init__(self, driver: KubernetesDriver) -> None:
        self.stream = driver.watch()
        self.queue: asyncio.Queue[TaskObserved] = asyncio.Queue()
        self.task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        async for observed in self.stream:
            await self.queue.put(observed)

    async def next(self) -> TaskObserved:
        return await asyncio.wait_for(self.queue.get(), 5)

    async def quiet(self) -> None:
        """Nothing more is reported for a while."""
        await asyncio.sleep(0.2)
        assert self.queue.empty(), f"unexpected: {self.queue.get_nowait()}"

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.stream.aclose()


@pytest.fixture
async def watcher(driver: KubernetesDriver) -> AsyncIterator[Watcher]:
    watching = Watcher(driver)
    yield watching
    await watching.close()


def test_the_driver_is_a_launch_driver(driver: KubernetesDriver) -> None:
    implementation: LaunchDriver = driver  # checked by mypy --strict
    assert implementation is driver


async def test_start_creates_a_labelled_pod_owned_by_the_jobs_headless_service(
    driver: KubernetesDriver, kube: FakeKubeApi
) -> None:
    await driver.start(launch())

    pod = kube.pods[A1]
    service = kube.services[JOB]
    assert pod["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "corral",
        "corral.dev/job": JOB,
        "corral.dev/role": "worker",
        "corral.dev/index": "1",
        "corral.dev/attempt": "1",
    }
    assert pod["metadata"]["namespace"] == NS
    assert pod["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Service", "name": JOB, "uid": service["metadata"]["uid"]}
    ]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["/bin/sh", "-c", "python train.py"]
    assert container["resources"]["limits"] == {"cpu": "4000m", "memory": "16384Mi", "nvidia.com/gpu": "2"}
    assert container["resources"]["requests"] == {"cpu": "4000m", "memory": "16384Mi"}
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["MASTER_ADDR"] == f"worker-0.{JOB}.{NS}.svc"
    assert env["PAI_HOST_IP_worker_1"] == f"worker-1.{JOB}.{NS}.svc"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"  # the device plugin's GPUs, as the container sees them
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("worker-1", JOB)
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["activeDeadlineSeconds"] == 3600
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["gpu-node-3"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"corral.dev/job": JOB}


async def test_start_is_idempotent_and_a_job_shares_one_service(
    driver: KubernetesDriver, kube: FakeKubeApi
) -> None:
    await driver.start(launch())
    first_uid = kube.pods[A1]["metadata"]["uid"]
    await driver.start(launch())  # a redelivered launch: 409s, no second pod
    await driver.start(launch(index=0, attempt=A2))

    assert set(kube.pods) == {A1, A2}
    assert kube.pods[A1]["metadata"]["uid"] == first_uid
    assert list(kube.services) == [JOB]
    owners = {kube.pods[a]["metadata"]["ownerReferences"][0]["uid"] for a in (A1, A2)}
    assert owners == {kube.services[JOB]["metadata"]["uid"]}


ENDINGS = [
    pytest.param(
        terminated(0, "Completed"), TaskEnded(0, None, None, "exited with code 0"), "unknown", id="succeeded"
    ),
    pytest.param(terminated(3), TaskEnded(3, None, None, "exited with code 3"), "unknown", id="exit-3"),
    pytest.param(
        terminated(137, "OOMKilled"),
        TaskEnded(137, None, "oom_killed", "killed for exceeding its memory limit (OOMKilled)"),
        "permanent",
        id="oom-killed",
    ),
    pytest.param(
        {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."},
        TaskEnded(None, None, "evicted", "evicted by the kubelet: The node was low on resource: memory."),
        "unknown",
        id="evicted",
    ),
    pytest.param(
        {**terminated(137), "reason": "DeadlineExceeded", "message": "Pod was active too long"},
        TaskEnded(
            137, None, "max_runtime_exceeded", "ran longer than max_runtime_s: Pod was active too long"
        ),
        "permanent",
        id="deadline-exceeded",
    ),
    pytest.param(
        terminated(
            143,
            phase="Failed",
            conditions=[
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": "p",
                }
            ],
        ),
        TaskEnded(143, None, "preempted", "preempted by the Kubernetes scheduler: p"),
        "transient",
        id="preempted",
    ),
]


@pytest.mark.parametrize(("status", "ended", "classification"), ENDINGS)
async def test_watch_reports_running_then_how_the_pod_ended(
    driver: KubernetesDriver,
    kube: FakeKubeApi,
    watcher: Watcher,
    status: dict[str, Any],
    ended: TaskEnded,
    classification: str,
) -> None:
    await driver.start(launch())
    kube.set_status(A1, running())
    assert await watcher.next() == TaskObserved(A1, running=True)

    kube.set_status(A1, status)
    assert await watcher.next() == TaskObserved(A1, running=False, ended=ended)
    verdict = classify(TaskEnd(ended.exit_code, ended.signal, ended.platform))
    assert verdict.classification == classification
    kube.set_status(A1, status)  # the same status again (a label update, say): nothing new
    await watcher.quiet()


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff"])
async def test_an_image_that_cannot_be_pulled_ends_the_attempt_and_frees_the_node(
    driver: KubernetesDriver, kube: FakeKubeApi, watcher: Watcher, reason: str
) -> None:
    await driver.start(launch(image="registry.example/missing:1"))
    kube.set_status(A1, waiting(reason, "manifest unknown"))

    observed = await watcher.next()
    assert observed.ended is not None
    assert (
        observed.ended.reason
        == f"image registry.example/missing:1 could not be pulled ({reason}): manifest unknown"
    )
    assert observed.ended.platform == "image_pull_failed"
    assert ("pod", A1, 0) in kube.deletions
    assert A1 not in kube.pods
    await watcher.quiet()  # its deletion is not a second ending


async def test_a_lost_node_or_a_pod_deleted_behind_corrals_back_is_reported(
    driver: KubernetesDriver, kube: FakeKubeApi, watcher: Watcher
) -> None:
    await driver.start(launch())
    await driver.start(launch(index=0, attempt=A2))
    kube.set_status(A1, running())
    kube.set_status(A2, running())
    assert {(await watcher.next()).attempt_id for _ in range(2)} == {A1, A2}

    kube.set_status(
        A1, {"phase": "Unknown", "reason": "NodeLost", "message": "node gpu-node-3 is unreachable"}
    )
    lost = await watcher.next()
    assert lost.ended is not None
    assert (lost.attempt_id, lost.ended.platform) == (A1, "node_lost")
    assert classify(TaskEnd(None, None, "node_lost")).classification == "transient"

    kube.remove_pod(A2)  # kubectl delete --force
    gone = await watcher.next()
    assert gone == TaskObserved(
        A2, False, TaskEnded(None, None, "task_lost", "the pod was deleted outside Corral")
    )


async def test_watch_resumes_after_410_gone_without_losing_or_repeating_a_change(
    driver: KubernetesDriver, kube: FakeKubeApi, watcher: Watcher
) -> None:
    for index, attempt in enumerate((A1, A2, A3)):
        await driver.start(launch(index=index, attempt=attempt))
    kube.set_status(A1, running())
    kube.set_status(A2, running())
    assert {(await watcher.next()).attempt_id for _ in range(2)} == {A1, A2}
    lists_before = kube.pod_lists()

    # History is compacted and the stream cut; while the driver is away A1 finishes
    # and A2's pod vanishes. Its resourceVersion is now too old: 410, list again.
    kube.force_gone()
    kube.set_status(A1, terminated(0, "Completed"))
    kube.remove_pod(A2)

    after = [await watcher.next(), await watcher.next()]
    assert sorted(after, key=lambda o: o.attempt_id) == [
        TaskObserved(A1, False, TaskEnded(0, None, None, "exited with code 0")),
        TaskObserved(A2, False, TaskEnded(None, None, "task_lost", "the pod was deleted outside Corral")),
    ]
    assert kube.pod_lists() == lists_before + 1
    kube.set_status(A3, running())  # the next thing reported is new: nothing was repeated
    assert await watcher.next() == TaskObserved(A3, running=True)


async def test_watch_reopens_a_dropped_stream_from_its_resource_version(
    driver: KubernetesDriver, kube: FakeKubeApi, watcher: Watcher
) -> None:
    await driver.start(launch())
    await watcher.quiet()  # listed (pending: nothing to say) and watching
    kube.set_status(A1, running())
    assert await watcher.next() == TaskObserved(A1, running=True)
    running_version = kube.pods[A1]["metadata"]["resourceVersion"]
    lists_before = kube.pod_lists()

    kube.break_watches()
    kube.set_status(A1, terminated(3))
    assert await watcher.next() == TaskObserved(A1, False, TaskEnded(3, None, None, "exited with code 3"))
    assert kube.pod_lists() == lists_before  # resumed from the resourceVersion, no re-list
    watches = [query for method, _, query in kube.calls if method == "GET" and "watch" in query]
    assert watches[-1]["resourceVersion"] == running_version


async def test_stop_deletes_the_pod_with_the_grace_period(
    driver: KubernetesDriver, kube: FakeKubeApi, watcher: Watcher
) -> None:
    await driver.start(launch())
    kube.set_status(A1, running())
    assert await watcher.next() == TaskObserved(A1, running=True)

    await driver.stop(A1, grace_s=7.5)
    assert kube.deletions == [("pod", A1, 8)]
    assert kube.pods[A1]["metadata"]["deletionTimestamp"]  # terminating: SIGTERM sent, still running
    await watcher.quiet()

    kube.finish_deletion(A1, exit_code=143)  # the kubelet: the command exited on SIGTERM
    assert await watcher.next() == TaskObserved(A1, False, TaskEnded(143, None, None, "exited with code 143"))
    await driver.stop(A1, grace_s=7.5)  # idempotent: already gone
    await driver.stop("att-01m81sd000000000000000000x", grace_s=1)  # never existed


async def test_reconcile_deletes_unexpected_pods_and_reports_the_expected_ones(
    driver: KubernetesDriver, kube: FakeKubeApi
) -> None:
    await driver.start(launch())
    await driver.start(launch(index=0, attempt=A2))  # e.g. from before a launcher restart
    kube.set_status(A1, running())
    kube.set_status(A2, running())

    assert await driver.reconcile({A1, A3}) == {A1}
    assert ("pod", A2, 0) in kube.deletions
    assert set(kube.pods) == {A1}
    assert JOB in kube.services  # the job still runs


async def test_reconcile_removes_a_finished_jobs_service_and_with_it_the_pods(
    client: ApiClient, kube: FakeKubeApi
) -> None:
    driver = KubernetesDriver(client, SETTINGS.model_copy(update={"keep_finished_s": 0}))
    await driver.start(launch())
    kube.set_status(A1, terminated(0, "Completed"))

    assert await driver.reconcile(set()) == set()
    assert kube.services == {}
    assert kube.pods == {}  # garbage-collected through the owner reference


async def test_logs_follow_the_pod_until_it_ends(driver: KubernetesDriver, kube: FakeKubeApi) -> None:
    await driver.start(launch())
    stream = await driver.logs(A1, follow=True)
    received: list[bytes] = []

    async def read() -> None:
        async for chunk in stream:
            received.append(chunk)

    reader = asyncio.create_task(read())
    await asyncio.sleep(0.05)  # the container is still being created: the driver waits
    kube.set_status(A1, running())
    kube.append_log(A1, b"step 1\n")
    await asyncio.sleep(0.05)
    kube.append_log(A1, b"step 2\n")
    kube.set_status(A1, terminated(0, "Completed"))
    await asyncio.wait_for(reader, 5)
    assert b"".join(received) == b"step 1\nstep 2\n"

    whole = b"".join([chunk async for chunk in await driver.logs(A1, follow=False)])
    assert whole == b"step 1\nstep 2\n"
    with pytest.raises(AttemptNotFound):
        await driver.logs(A2, follow=False)


async def test_a_driver_built_from_a_configuration_closes_its_own_client(kube: FakeKubeApi) -> None:
    async with KubernetesDriver(Configuration(host=kube.url), SETTINGS) as driver:
        await driver.start(launch())
    assert A1 in kube.pods
