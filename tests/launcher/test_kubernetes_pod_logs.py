"""Pod logs through Corral's API: the Kubernetes runner (real Postgres, the FAKE API
server of tests/launcher/fake_kube_api.py) appends each running pod's log to its
attempt's log file as it comes, the launcher answers for it on the pod node's
``corral.logs.<node>`` (real NATS), the API's log follower (services/api/jobs/logs.py, as
``GET /api/v1/jobs/{id}/logs?follow=true`` uses it) serves it while the pod runs and
stops only after the last line, and a runner that restarts resumes every file where it
ends — no line twice, none left out — even for a pod that ended while no runner ran."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from services.api.jobs.logs import AttemptLog
from services.api.jobs.repository import JobRepository
from services.launcher.kubernetes.driver import KubernetesDriver
from services.launcher.kubernetes.log_files import cursor_path, whole_seconds
from services.launcher.kubernetes.names import pod_name
from services.launcher.kubernetes.runner import KubernetesRunner
from services.launcher.kubernetes.settings import KubernetesSettings
from services.launcher.task_logs import LogServer, answer_for_nodes
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from tests.launcher import attempts
from tests.launcher.fake_kube_api import FakeKubeApi, running, terminated, waiting
from tests.launcher.kubelet_logs import rfc3339_nano

NODE = "k8s-gpu-1"
SETTINGS = KubernetesSettings(
    namespace="corral",
    retry_delay_s=0.05,
    log_wait_interval_s=0.05,
    log_flush_interval_s=0.05,
    default_image="busybox:1.36",
)


@contextlib.asynccontextmanager
async def runner_on(db: Database, kube: FakeKubeApi, log_dir: Path) -> AsyncIterator[KubernetesRunner]:
    """A runner following the pods (its ``follow`` root task running), as the launcher
    runs it; leaving the block stops it as a launcher that goes away would."""
    async with (
        ApiClient(Configuration(host=kube.url)) as client,
        KubernetesDriver(client, SETTINGS) as driver,
    ):
        runner = KubernetesRunner(db, driver, log_dir=log_dir, node_pattern="^k8s-", stop_grace_s=5)
        await runner.hold_leases(15)
        task = asyncio.create_task(runner.follow())
        try:
            yield runner
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def until(condition: Callable[[], object], what: str) -> None:
    for _ in range(200):
        result = condition()
        if await result if inspect.isawaitable(result) else result:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"{what}: not within 5 s")


async def state_of(db: Database, attempt_id: str) -> str:
    return str(await db.fetchval("SELECT state FROM launcher.attempts WHERE id = $1", attempt_id))


async def state_is(db: Database, attempt_id: str, state: str) -> bool:
    return await state_of(db, attempt_id) == state


async def log_path_of(db: Database, attempt_id: str) -> Path:
    path = await db.fetchval("SELECT log_path FROM launcher.attempts WHERE id = $1", attempt_id)
    assert path, "no log_path recorded"
    return Path(path)


def contents(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


@pytest.fixture
async def attempt_id(db: Database) -> str:
    await attempts.known_nodes(db, NODE)
    (attempt,) = await attempts.assigned(db, NODE, instances=1)
    return attempt


async def test_the_api_follows_a_pods_log_as_it_comes_until_its_last_line(
    db: Database, bus: NatsBus, kube: FakeKubeApi, tmp_path: Path, attempt_id: str
) -> None:
    name = pod_name(attempt_id)
    async with runner_on(db, kube, tmp_path / "logs") as runner, asyncio.TaskGroup() as tg:
        # As the launcher does (app.run_on_kubernetes): it answers for its nodes' logs.
        server = LogServer(tmp_path / "logs")
        answering = tg.create_task(answer_for_nodes(bus, server, runner.epochs.keys, 0.05))
        await runner.start_attempt(attempt_id, NODE)
        kube.set_status(name, running())
        await until(lambda: state_is(db, attempt_id, "RUNNING"), "running")
        path = await log_path_of(db, attempt_id)
        job_id = await db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", attempt_id)
        # The node agent's layout: the API does not know which driver ran the task.
        assert path == tmp_path / "logs" / job_id / "worker-0" / "attempt-1.log"

        kube.append_log(name, b"step 1\n")
        await until(lambda: contents(path) == b"step 1\n", "the first line in the file")

        received: list[bytes] = []
        repo = JobRepository(db)
        row = await repo.attempt_for_logs(job_id, "worker", 0, None)
        assert row is not None

        async def ask(subject: str, question: bytes) -> bytes:
            return await bus.request(subject, question, 5)

        async def read() -> None:
            async for chunk in AttemptLog(ask, repo, row, patience_s=5).follow():
                received.append(chunk)

        reader = asyncio.create_task(read())
        await until(lambda: b"".join(received) == b"step 1\n", "the API sends what the file holds")
        kube.append_log(name, b"step 2\n")
        await until(
            lambda: b"".join(received) == b"step 1\nstep 2\n", "the API sends the next line as it comes"
        )
        # The last words and the end at once, passed on late: the end is recorded only
        # once they are in the file, so the API's follower (which stops at the
        # attempt's end) gets them.
        kube.hold_logs()
        kube.append_log(name, b"last words\n")
        kube.set_status(name, terminated(0, "Completed"))
        await asyncio.sleep(0.5)
        assert await state_of(db, attempt_id) == "RUNNING"  # its log is not all in yet
        kube.release_logs()
        await asyncio.wait_for(reader, 5)
        answering.cancel()
    assert b"".join(received) == b"step 1\nstep 2\nlast words\n"
    assert await state_of(db, attempt_id) == "EXITED"
    assert path.read_bytes() == b"step 1\nstep 2\nlast words\n"
    assert not cursor_path(path).exists()  # the attempt is settled: only its log stays
    kube.remove_pod(name)  # pods are deleted; the log is not
    assert path.read_bytes() == b"step 1\nstep 2\nlast words\n"


async def test_a_restarted_runner_resumes_each_log_where_its_file_ends(
    db: Database, kube: FakeKubeApi, tmp_path: Path, attempt_id: str
) -> None:
    """Lines with one and the same timestamp, a line cut in the middle, and the pod ends
    while no runner is there: the file is the pod's log, byte for byte."""
    name = pod_name(attempt_id)
    second = (time.time_ns() // 1_000_000_000) * 1_000_000_000
    at = second + 250_000_000  # sinceTime says whole seconds: the resumed stream repeats
    async with runner_on(db, kube, tmp_path / "logs") as runner:
        await runner.start_attempt(attempt_id, NODE)
        kube.set_status(name, running())
        await until(lambda: state_is(db, attempt_id, "RUNNING"), "running")
        path = await log_path_of(db, attempt_id)
        kube.append_log(name, b"a\n", at=second)
        kube.append_log(name, b"b\n", at=at)
        kube.append_log(name, b"c\n", at=at)
        kube.append_log(name, b"d, half", at=at)
        await until(lambda: contents(path) == b"a\nb\nc\nd, half", "the lines so far")
    # No runner: the pod writes on — the rest of the cut line, more lines stamped the
    # same nanosecond as those already in the file — and ends.
    kube.append_log(name, b" and the rest\n", at=at + 1)  # (part of the line stamped `at`)
    kube.append_log(name, b"e\n", at=at)
    kube.append_log(name, b"f, the last words\n", at=at + 1_000_000_000)
    kube.set_status(name, terminated(0, "Completed"))
    assert await state_of(db, attempt_id) == "RUNNING"  # nobody recorded the end

    async with runner_on(db, kube, tmp_path / "logs"):
        await until(lambda: state_is(db, attempt_id, "EXITED"), "the end, recorded after restart")
    assert (
        path.read_bytes() == kube.log_text(name) == b"a\nb\nc\nd, half and the rest\ne\nf, the last words\n"
    )
    resumed = [q for q in kube.log_requests if q.get("sinceTime")]
    assert resumed, "the restarted runner asked for the log from where the file ended"
    assert resumed[-1]["sinceTime"] == whole_seconds(rfc3339_nano(at))
    assert all(q.get("timestamps") == "true" and q.get("follow") == "true" for q in kube.log_requests)


async def test_a_pod_that_never_runs_leaves_no_log_and_its_end_waits_for_nothing(
    db: Database, kube: FakeKubeApi, tmp_path: Path, attempt_id: str
) -> None:
    name = pod_name(attempt_id)
    async with runner_on(db, kube, tmp_path / "logs") as runner:
        await runner.start_attempt(attempt_id, NODE)
        kube.set_status(name, waiting("ErrImagePull", "no such image"))
        await until(lambda: state_is(db, attempt_id, "EXITED"), "the end")
    assert await db.fetchval("SELECT log_path FROM launcher.attempts WHERE id = $1", attempt_id) is None
    assert not (tmp_path / "logs").exists()
    assert kube.log_requests == []
