"""The API's side of interactive streams into pods, for the Kubernetes exec and forward
tests: a launcher answering for ``NODE`` (its runner creating pods on the FAKE API
server, tests/launcher/fake_kube_api.py, and ``PodInteractive`` answering
``corral.interactive.<node>.open`` over real NATS), and the test opening streams as
services/api does (``StreamEnd``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import ApiClient, Configuration
from nats.errors import NoRespondersError

from services.launcher.kubernetes.driver import KubernetesDriver
from services.launcher.kubernetes.exec import PodSockets
from services.launcher.kubernetes.interactive import PodInteractive
from services.launcher.kubernetes.names import pod_name
from services.launcher.kubernetes.runner import KubernetesRunner
from services.launcher.kubernetes.settings import KubernetesSettings
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.interactive.protocol import (
    Channel,
    OpenAnswer,
    OpenRequest,
    from_node_subject,
    open_subject,
    to_node_subject,
)
from shared.interactive.stream import StreamEnd
from tests.launcher import attempts
from tests.launcher.fake_kube_api import FakeKubeApi, running

NODE = "k8s-gpu-1"
SETTINGS = KubernetesSettings(namespace="corral", retry_delay_s=0.05, default_image="busybox:1.36")


@dataclass
class ApiSide:
    """What the API does to open a stream on ``NODE``."""

    bus: NatsBus

    async def open(self, **fields: Any) -> tuple[OpenAnswer, StreamEnd]:
        """Open a stream as the API does: its end subscribed first, then the request."""
        stream_id = os.urandom(16).hex()
        request = OpenRequest(stream_id=stream_id, user="alice", **fields)
        end = StreamEnd(
            self.bus.nc,
            send_subject=to_node_subject(NODE, stream_id),
            recv_subject=from_node_subject(NODE, stream_id),
        )
        await end.open()
        for _ in range(100):  # until the launcher has subscribed for its node
            try:
                reply = await self.bus.nc.request(open_subject(NODE), request.model_dump_json().encode(), 5)
                break
            except NoRespondersError:
                await asyncio.sleep(0.02)
        else:
            raise AssertionError("nobody answers for the node")
        answer = OpenAnswer.model_validate_json(reply.data)
        if not answer.ok:
            await end.close()
        return answer, end


@dataclass
class Launcher(ApiSide):
    runner: KubernetesRunner


@contextlib.asynccontextmanager
async def launcher_on(
    db: Database, bus: NatsBus, kube: FakeKubeApi, tmp_path: Path
) -> AsyncIterator[Launcher]:
    """The runner (holding the node's lease) and the interactive answerer, as
    ``app.run_on_kubernetes`` runs them."""
    async with (
        ApiClient(Configuration(host=kube.url)) as client,
        KubernetesDriver(client, SETTINGS) as driver,
    ):
        runner = KubernetesRunner(db, driver, log_dir=tmp_path / "logs", node_pattern="^k8s-")
        await runner.hold_leases(15)
        sockets = PodSockets(Configuration(host=kube.url), SETTINGS.namespace)
        serving = asyncio.create_task(PodInteractive(bus, sockets).serve(runner.epochs.keys, 0.05))
        try:
            yield Launcher(bus, runner)
        finally:
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
            await sockets.close()


async def declare_port(db: Database, attempt_id: str, port: int) -> None:
    """The attempt's allocated port ``http`` (its pod declares it as a container port)."""
    await db.execute(
        "UPDATE launcher.attempts SET ports = jsonb_build_object('http', jsonb_build_array($2::int))"
        " WHERE id = $1",
        attempt_id,
        port,
    )


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def started(launcher: Launcher, kube: FakeKubeApi, pod: dict[str, Any]) -> str:
    await launcher.runner.start_attempt(pod["attempt_id"], NODE)
    name = pod_name(pod["attempt_id"])
    kube.set_status(name, running())
    return name


async def read_until(end: StreamEnd, channel: int, expected: bytes) -> bytes:
    """What ``channel`` carries until it holds ``expected``; fails on any other channel."""
    got = b""
    async with asyncio.timeout(5):
        while expected not in got:
            frame = await end.receive()
            assert frame is not None, f"closed ({end.close_reason!r}) after {got!r}"
            assert frame[0] == channel, f"a frame on channel {frame[0]}: {frame[1]!r}"
            got += frame[1]
    return got


async def final_status(end: StreamEnd) -> bytes:
    async with asyncio.timeout(5):
        while (frame := await end.receive()) is not None:
            if frame[0] == Channel.STATUS:
                assert await end.receive() is None, "nothing after the Status"
                return frame[1]
    raise AssertionError(f"closed without a Status: {end.close_reason!r}")


async def a_task(db: Database, port: int) -> dict[str, Any]:
    """A one-task job on ``NODE`` whose port ``http`` is ``port``, assigned, its pod not
    yet created; the task's fields of an ``OpenRequest``."""
    await attempts.known_nodes(db, NODE)
    (attempt_id,) = await attempts.assigned(db, NODE, instances=1)
    await declare_port(db, attempt_id, port)
    job_id = await db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", attempt_id)
    return {"attempt_id": attempt_id, "job_id": job_id, "task_role": "worker", "task_index": 0}
