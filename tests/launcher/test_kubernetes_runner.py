"""The Kubernetes runner on real Postgres and the FAKE API server (tests/launcher/
fake_kube_api.py: real HTTP, pods scripted by the test): an assignment becomes one Pod
however often it is delivered, the pods' fate comes back as Corral's reports, and
reconcile repairs what events missed."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from services.launcher.kubernetes.driver import KubernetesDriver
from services.launcher.kubernetes.manifests import ManifestError
from services.launcher.kubernetes.names import pod_name
from services.launcher.kubernetes.runner import KubernetesRunner, _launch
from services.launcher.kubernetes.settings import KubernetesSettings
from services.launcher.repository import SQL
from shared.db.pool import Database
from shared.events import TaskAssigned, parse_event
from shared.events.jobs import TaskAssignedData
from tests.launcher import attempts
from tests.launcher.fake_kube_api import FakeKubeApi, running, terminated
from tests.launcher.launcher_process import kubernetes_launcher_env, start_launcher

NODE = "k8s-gpu-1"
SETTINGS = KubernetesSettings(namespace="corral", retry_delay_s=0.05, default_image="busybox:1.36")


@pytest.fixture
async def runner(db: Database, kube: FakeKubeApi, tmp_path: Path) -> AsyncIterator[KubernetesRunner]:
    async with (
        ApiClient(Configuration(host=kube.url)) as client,
        KubernetesDriver(client, SETTINGS) as driver,
    ):
        runner = KubernetesRunner(db, driver, log_dir=tmp_path / "logs", node_pattern="^k8s-", stop_grace_s=5)
        await attempts.known_nodes(db, NODE, "local")  # only one is Kubernetes'
        await runner.hold_leases(15)
        yield runner


async def assigned(db: Database, instances: int = 2, state: str = "ASSIGNED") -> list[str]:
    return await attempts.assigned(db, NODE, instances, state)


async def until(condition: Callable[[], object], what: str) -> None:
    for _ in range(200):
        if await condition():  # type: ignore[misc]
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"{what}: not within 5 s")


async def attempt(db: Database, attempt_id: str) -> dict[str, object]:
    row = await db.fetchrow(
        "SELECT state, exit_code, classification, reason FROM launcher.attempts WHERE id = $1", attempt_id
    )
    assert row is not None
    return dict(row)


async def events(db: Database, kind: str) -> list[dict[str, object]]:
    rows = await db.fetch(
        "SELECT payload FROM corral.outbox WHERE subject LIKE $1 ORDER BY id", f"corral.task.{kind}.%"
    )
    return [parse_event(r["payload"]).data.model_dump() for r in rows]


@contextlib.asynccontextmanager
async def following(runner: KubernetesRunner) -> AsyncIterator[None]:
    task = asyncio.create_task(runner.follow())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_an_assignment_becomes_one_pod_and_the_pods_fate_comes_back(
    db: Database, kube: FakeKubeApi, runner: KubernetesRunner
) -> None:
    assert set(runner.epochs) == {NODE}  # the pattern picks Kubernetes' nodes only
    first, second = await assigned(db)
    for attempt_id in (first, second):
        data = TaskAssignedData(
            attempt_id=attempt_id,
            job_id="j",
            generation=1,
            task_role="worker",
            task_index=0,
            node_id=NODE,
            gpu_indices=[0],
        )
        await runner.handle(TaskAssigned(source="corral/launcher", subject=attempt_id, data=data))
    await runner.start_attempt(first, NODE)  # delivered again: claimed already, nothing new
    assert sorted(kube.pods) == sorted([pod_name(first), pod_name(second)])
    assert len([c for c in kube.calls if c[0] == "POST" and c[1].endswith("/pods")]) == 2
    pod = kube.pods[pod_name(first)]
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["WORLD_SIZE"] == "2"
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert "PATH" not in env  # the image's own, not this host's
    assert (await attempt(db, first))["state"] == "STARTING"

    async with following(runner):
        kube.set_status(pod_name(first), running())
        await until(lambda: _state_is(db, first, "RUNNING"), "first running")
        kube.set_status(pod_name(first), terminated(0, "Completed"))
        kube.set_status(pod_name(second), terminated(137, "OOMKilled"))
        await until(lambda: _state_is(db, second, "EXITED"), "second ended")
        await until(lambda: _state_is(db, first, "EXITED"), "first ended")
    assert (await attempt(db, first))["exit_code"] == 0
    oom = await attempt(db, second)
    assert (oom["exit_code"], oom["classification"]) == (137, "permanent")
    assert oom["reason"] == "killed for exceeding its memory limit (OOMKilled)"
    started = await events(db, "started")
    # (The OOM-killed one ran too, briefly: its container has a start time.)
    assert {(e["attempt_id"], e["pid"], e["node_id"]) for e in started} == {
        (first, None, NODE),
        (second, None, NODE),
    }
    exited = {e["attempt_id"]: e for e in await events(db, "exited")}
    assert set(exited) == {first, second}
    assert (exited[first]["exit_code"], exited[second]["classification"]) == (0, "permanent")


async def _state_is(db: Database, attempt_id: str, state: str) -> bool:
    return (await attempt(db, attempt_id))["state"] == state


async def test_a_pod_the_platform_stopped_ends_as_the_platform_said(
    db: Database, kube: FakeKubeApi, runner: KubernetesRunner
) -> None:
    """A preempted pod ends like any deleted pod (143): the stop request's platform
    condition makes it transient (requeued, uncounted), even when the runner acts on the
    request from its reconcile loop, before (or without) the request's event."""
    (attempt_id,) = await assigned(db, instances=1)
    await runner.start_attempt(attempt_id, NODE)
    async with following(runner):
        kube.set_status(pod_name(attempt_id), running())
        await until(lambda: _state_is(db, attempt_id, "RUNNING"), "running")
        assert await db.fetchval(SQL.request_stop, attempt_id, "preempted for job-x", "preempted") == NODE
        await runner.reconcile()
        assert ("pod", pod_name(attempt_id), 5) in kube.deletions  # with the grace period
        kube.set_status(pod_name(attempt_id), terminated(143, "Error"))
        await until(lambda: _state_is(db, attempt_id, "EXITED"), "ended")
    ended = await attempt(db, attempt_id)
    assert (ended["exit_code"], ended["classification"]) == (143, "transient")
    assert ended["reason"] == "stopped: preempted for job-x"


async def test_another_runner_holding_the_node_fences_this_one(
    db: Database, kube: FakeKubeApi, runner: KubernetesRunner
) -> None:
    (attempt_id,) = await assigned(db, instances=1)
    # A second runner (say, after a failover) takes the node's lease: a new epoch.
    await db.execute("UPDATE launcher.agents SET epoch = epoch + 1 WHERE node_id = $1", NODE)
    await runner.start_attempt(attempt_id, NODE)
    assert kube.pods == {}  # the stale runner's claim found nothing: no pod, no double launch
    assert (await attempt(db, attempt_id))["state"] == "ASSIGNED"


async def test_reconcile_starts_missed_assignments_reports_vanished_pods_and_removes_strays(
    db: Database, kube: FakeKubeApi, runner: KubernetesRunner
) -> None:
    missed, vanished = await assigned(db)  # the assignment events never arrived
    await db.execute("UPDATE launcher.attempts SET state = 'RUNNING' WHERE id = $1", vanished)
    await runner.reconcile()
    assert sorted(kube.pods) == [pod_name(missed)]  # started by reconcile
    lost = await attempt(db, vanished)  # RUNNING in Postgres, no pod in the cluster
    assert (lost["state"], lost["classification"]) == ("LOST", "transient")
    # A pod nobody expects (its attempt settled while the runner was away) is deleted.
    await db.execute("UPDATE launcher.attempts SET state = 'EXITED' WHERE id = $1", missed)
    await runner.reconcile()
    assert kube.pods == {} or all(p["metadata"].get("deletionTimestamp") for p in kube.pods.values())
    assert ("pod", pod_name(missed), 0) in kube.deletions


@pytest.mark.slow
async def test_the_launcher_service_runs_tasks_as_pods_when_told_to(
    db: Database, database_url: str, nats_url: str, kube: FakeKubeApi, tmp_path: Path
) -> None:
    """The real launcher process, CORRAL_LAUNCHER_DRIVER=kubernetes, credentials from a
    kubeconfig that points at the fake API server."""
    await attempts.known_nodes(db, NODE, "local")
    env = kubernetes_launcher_env(tmp_path, kube.url, "not-checked", database_url, nats_url)
    output = tmp_path / "launcher.log"
    launcher = start_launcher(env, output)
    try:
        (attempt_id,) = await assigned(db, instances=1)  # the reconcile loop finds it
        name = pod_name(attempt_id)

        async def has_pod() -> bool:
            assert launcher.poll() is None, output.read_text()
            return name in kube.pods

        await until(has_pod, "the pod")
        kube.append_log(name, b"hello from the pod\n")
        kube.set_status(name, terminated(0, "Completed"))
        await until(lambda: _state_is(db, attempt_id, "EXITED"), "the reported end")
        # Its log is in the attempt's file under CORRAL_HOME/logs, where the API reads it.
        log_path = await db.fetchval("SELECT log_path FROM launcher.attempts WHERE id = $1", attempt_id)
        assert Path(log_path).is_relative_to(tmp_path / "logs")
        assert await asyncio.to_thread(Path(log_path).read_bytes) == b"hello from the pod\n"
        holder = await db.fetchval("SELECT epoch FROM launcher.agents WHERE node_id = $1", NODE)
        assert holder is not None  # the launcher holds the Kubernetes node's lease
        assert await db.fetchval("SELECT count(*) FROM launcher.agents WHERE node_id = 'local'") == 0
    finally:
        launcher.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(launcher.wait, 15)
        except subprocess.TimeoutExpired:
            launcher.kill()
            raise
    assert code == 0, output.read_text()


def test_a_job_with_ssh_is_refused_on_kubernetes_rather_than_run_without_it() -> None:
    """Node agents wire a generic job's ssh; the Kubernetes driver does not yet, and says so
    when the task would start (the attempt then ends with this reason)."""
    spec = {"name": "t", "tasks": [{"name": "main", "command": "ssh main-0 true"}], "ssh": {}}
    with pytest.raises(ManifestError, match="the Kubernetes driver does not yet"):
        _launch({"spec": spec}, "node-1", [])
