"""Exec into pods: the launcher answers ``corral.interactive.<node>.open`` for the nodes
it runs through Kubernetes (real NATS, real Postgres, the Kubernetes runner creating the
pods), opens the pod's ``pods/exec`` WebSocket on the FAKE API server
(tests/launcher/fake_kube_exec.py) exactly as kubectl does, and passes the frames
through both ways; the test plays the API's end of the stream (tests/launcher/
pod_streams.py)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from services.launcher.kubernetes.names import NODE_ANNOTATION, pod_name
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.interactive.protocol import Channel, OpenAnswer, exit_code_of, resize_payload
from tests.launcher import attempts
from tests.launcher.fake_kube_api import FakeKubeApi, running, waiting
from tests.launcher.fake_kube_exec import V4, V5
from tests.launcher.launcher_process import kubernetes_launcher_env, start_launcher
from tests.launcher.pod_streams import (
    NODE,
    ApiSide,
    a_task,
    final_status,
    launcher_on,
    read_until,
    started,
    unused_port,
)


@pytest.fixture
async def pod(db: Database) -> dict[str, Any]:
    return await a_task(db, unused_port())


async def test_a_terminal_into_a_pod_passes_keystrokes_resizes_and_the_exit_code(
    db: Database, bus: NatsBus, kube: FakeKubeApi, tmp_path: Path, pod: dict[str, Any]
) -> None:
    async with launcher_on(db, bus, kube, tmp_path) as launcher:
        name = await started(launcher, kube, pod)
        answer, end = await launcher.open(kind="exec", command=["python", "-i"], cols=100, rows=30, **pod)
        assert answer == OpenAnswer(ok=True)
        (call,) = kube.streams.exec_calls
        assert call.pod == name
        assert call.query == [  # kubectl's call: one `command` per argument, no stderr with a tty
            ("command", "python"),
            ("command", "-i"),
            ("container", "task"),
            ("stdin", "true"),
            ("stdout", "true"),
            ("stderr", "false"),
            ("tty", "true"),
        ]
        assert call.protocol == V5
        await read_until(end, Channel.STDOUT, b"[size 100x30]")  # the size before the prompt
        await end.send(Channel.STDIN, b"print(1)\r")
        await read_until(end, Channel.STDOUT, b"print(1)\r")
        await end.send(Channel.RESIZE, resize_payload(120, 40))
        await read_until(end, Channel.STDOUT, b"[size 120x40]")
        assert kube.streams.resizes == [(100, 30), (120, 40)]
        await end.send(Channel.STDIN, b"exit 3\r")
        await read_until(end, Channel.STDOUT, b"exit 3\r")
        status = await final_status(end)
    assert exit_code_of(status) == 3
    assert end.close_reason == ""


async def test_a_command_without_a_terminal_gets_stderr_apart_and_ends_with_its_input(
    db: Database, bus: NatsBus, kube: FakeKubeApi, tmp_path: Path, pod: dict[str, Any]
) -> None:
    async with launcher_on(db, bus, kube, tmp_path) as launcher:
        await started(launcher, kube, pod)
        answer, end = await launcher.open(kind="exec", command=["cat"], tty=False, **pod)
        assert answer.ok
        (call,) = kube.streams.exec_calls
        assert (call.values("stderr"), call.values("tty"), call.command) == (["true"], ["false"], ["cat"])
        await read_until(end, Channel.STDERR, b"started cat\n")
        await end.send(Channel.STDIN, b"a line\n")
        await read_until(end, Channel.STDOUT, b"a line\n")
        await end.send(Channel.EOF)  # v5 says stdin ended: cat ends, with 0
        assert exit_code_of(await final_status(end)) == 0
        assert kube.streams.resizes == []  # no terminal, no size


async def test_on_a_cluster_without_v5_the_end_of_input_cannot_be_said_and_the_exec_goes_on(
    db: Database, bus: NatsBus, kube: FakeKubeApi, tmp_path: Path, pod: dict[str, Any]
) -> None:
    kube.streams.exec_protocols = (V4,)
    async with launcher_on(db, bus, kube, tmp_path) as launcher:
        await started(launcher, kube, pod)
        answer, end = await launcher.open(kind="exec", command=["cat"], tty=False, **pod)
        assert answer.ok
        assert kube.streams.exec_calls[0].protocol == V4
        await read_until(end, Channel.STDERR, b"started cat\n")
        await end.send(Channel.EOF)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await end.receive()
        await end.send(Channel.STDIN, b"exit 0\n")
        await read_until(end, Channel.STDOUT, b"exit 0\n")
        assert exit_code_of(await final_status(end)) == 0


async def test_a_shell_is_opened_when_no_command_is_given(
    db: Database, bus: NatsBus, kube: FakeKubeApi, tmp_path: Path, pod: dict[str, Any]
) -> None:
    async with launcher_on(db, bus, kube, tmp_path) as launcher:
        await started(launcher, kube, pod)
        answer, end = await launcher.open(kind="exec", **pod)
        assert answer.ok
        await end.close()
    (call,) = kube.streams.exec_calls
    assert call.command[:2] == ["/bin/sh", "-c"]
    assert "exec /bin/bash" in call.command[2]


async def test_a_task_that_is_not_running_here_is_refused_and_nothing_is_opened(
    db: Database, bus: NatsBus, kube: FakeKubeApi, tmp_path: Path, pod: dict[str, Any]
) -> None:
    async with launcher_on(db, bus, kube, tmp_path) as launcher:
        answer, _ = await launcher.open(kind="exec", **pod)  # no pod yet
        assert answer.reason == "not_running"
        assert answer.error == f"task worker-0 of job {pod['job_id']} has no pod (it ended, or never started)"

        await launcher.runner.start_attempt(pod["attempt_id"], NODE)
        name = pod_name(pod["attempt_id"])
        kube.set_status(name, waiting("ContainerCreating"))
        answer, _ = await launcher.open(kind="exec", **pod)
        assert answer.reason == "not_running"
        assert answer.error is not None
        assert "is not running: its pod is Pending, its container not started" in answer.error

        kube.set_status(name, running())
        kube.pods[name]["metadata"]["annotations"][NODE_ANNOTATION] = "k8s-gpu-2"  # runs elsewhere
        answer, _ = await launcher.open(kind="exec", **pod)
        assert (answer.reason, answer.error) == (
            "not_running",
            f"task worker-0 of job {pod['job_id']} does not run on node {NODE}",
        )
        answer, _ = await launcher.open(kind="exec", **{**pod, "job_id": "job-someone-elses"})
        assert answer.reason == "not_running"
    assert kube.streams.exec_calls == []


async def test_a_stream_with_no_data_either_way_is_ended_after_its_idle_timeout(
    db: Database, bus: NatsBus, kube: FakeKubeApi, tmp_path: Path, pod: dict[str, Any]
) -> None:
    async with launcher_on(db, bus, kube, tmp_path) as launcher:
        await started(launcher, kube, pod)
        answer, end = await launcher.open(kind="exec", command=["sh"], idle_timeout_s=0.3, **pod)
        assert answer.ok
        await read_until(end, Channel.STDOUT, b"[size 80x24]")
        async with asyncio.timeout(5):
            while await end.receive() is not None:
                pass
    assert end.close_reason == "no data either way for 0.3 s"


async def test_a_launcher_that_stops_ends_its_open_streams_saying_why(
    db: Database, bus: NatsBus, kube: FakeKubeApi, tmp_path: Path, pod: dict[str, Any]
) -> None:
    async with launcher_on(db, bus, kube, tmp_path) as launcher:
        await started(launcher, kube, pod)
        answer, end = await launcher.open(kind="exec", command=["sh"], **pod)
        assert answer.ok
        await read_until(end, Channel.STDOUT, b"[size 80x24]")
    async with asyncio.timeout(5):
        assert await end.receive() is None
    assert end.close_reason == "the launcher stopped"


@pytest.mark.slow
async def test_the_launcher_service_answers_for_its_kubernetes_nodes(
    db: Database, database_url: str, nats_url: str, bus: NatsBus, kube: FakeKubeApi, tmp_path: Path
) -> None:
    """The real launcher process (CORRAL_LAUNCHER_DRIVER=kubernetes, a kubeconfig naming
    the fake API server and a token): an exec through NATS reaches the pod with the
    cluster's credential."""
    await attempts.known_nodes(db, NODE)
    (attempt_id,) = await attempts.assigned(db, NODE, instances=1)
    job_id = await db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", attempt_id)
    env = kubernetes_launcher_env(tmp_path, kube.url, "the-cluster-token", database_url, nats_url)
    output = tmp_path / "launcher.log"
    launcher = start_launcher(env, output)
    try:
        name = pod_name(attempt_id)
        async with asyncio.timeout(20):
            while name not in kube.pods:  # the reconcile loop starts it
                assert launcher.poll() is None, output.read_text()
                await asyncio.sleep(0.05)
        kube.set_status(name, running())
        task = {"attempt_id": attempt_id, "job_id": job_id, "task_role": "worker", "task_index": 0}
        answer, end = await ApiSide(bus).open(kind="exec", command=["sh"], tty=False, **task)
        assert answer.ok, answer
        await read_until(end, Channel.STDERR, b"started sh\n")
        await end.send(Channel.STDIN, b"exit 7\n")
        assert exit_code_of(await final_status(end)) == 7
        (call,) = kube.streams.exec_calls
        assert call.authorization == "Bearer the-cluster-token"
    finally:
        launcher.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(launcher.wait, 15)
    assert code == 0, output.read_text()
