"""Port-forward into pods: the launcher opens the pod's ``pods/portforward`` WebSocket on
the FAKE API server (tests/launcher/fake_kube_exec.py: it connects to the port on the
loopback, the fake's pod network) exactly as kubectl does, takes off the kubelet's port
prefixes and passes the bytes through both ways, over real NATS to the test playing the
API's end (tests/launcher/pod_streams.py)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.interactive.protocol import DATA, ERROR, Channel
from tests.launcher.fake_kube_api import FakeKubeApi
from tests.launcher.fake_kube_exec import V4
from tests.launcher.pod_streams import (
    a_task,
    declare_port,
    launcher_on,
    read_until,
    started,
    unused_port,
)


@pytest.fixture
async def port_server() -> AsyncIterator[int]:
    """The task's labelled port: an echo server on the loopback (the fake's pod network)."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    yield int(server.sockets[0].getsockname()[1])
    server.close()
    await server.wait_closed()


@pytest.fixture
async def pod(db: Database, port_server: int) -> dict[str, Any]:
    return await a_task(db, port_server)


async def test_a_forward_carries_bytes_both_ways_to_the_tasks_port(
    db: Database, bus: NatsBus, kube: FakeKubeApi, tmp_path: Path, pod: dict[str, Any], port_server: int
) -> None:
    async with launcher_on(db, bus, kube, tmp_path) as launcher:
        name = await started(launcher, kube, pod)
        answer, end = await launcher.open(kind="forward", port=port_server, port_label="http", **pod)
        assert answer.ok
        (call,) = kube.streams.forward_calls
        assert (call.pod, call.query, call.protocol) == (name, [("ports", str(port_server))], V4)
        payload = os.urandom(1024 * 1024)  # more than one frame, more than the kubelet's chunks
        await end.send(DATA, payload)
        assert await read_until(end, DATA, payload) == payload  # the port's two bytes taken off
        await end.close()


async def test_a_forward_to_a_port_the_task_does_not_have_is_refused_with_its_ports(
    db: Database, bus: NatsBus, kube: FakeKubeApi, tmp_path: Path, pod: dict[str, Any], port_server: int
) -> None:
    async with launcher_on(db, bus, kube, tmp_path) as launcher:
        await started(launcher, kube, pod)
        answer, _ = await launcher.open(kind="forward", port=22, port_label="ssh", **pod)
    assert (answer.reason, answer.error) == (
        "no_such_port",
        f"task worker-0 of job {pod['job_id']} has no port 22 (ssh); its ports: {port_server}",
    )
    assert kube.streams.forward_calls == []


async def test_a_forward_to_a_port_nothing_listens_on_says_why_on_the_error_channel(
    db: Database, bus: NatsBus, kube: FakeKubeApi, tmp_path: Path, pod: dict[str, Any]
) -> None:
    silent = unused_port()
    await declare_port(db, pod["attempt_id"], silent)
    async with launcher_on(db, bus, kube, tmp_path) as launcher:
        await started(launcher, kube, pod)
        answer, end = await launcher.open(kind="forward", port=silent, port_label="http", **pod)
        assert answer.ok
        said = await read_until(end, ERROR, f"failed to connect to localhost:{silent}".encode())
        async with asyncio.timeout(5):
            assert await end.receive() is None
    assert end.close_reason == said.decode()


async def test_a_task_closing_its_connection_ends_the_forward_normally(
    db: Database, bus: NatsBus, kube: FakeKubeApi, tmp_path: Path, pod: dict[str, Any]
) -> None:
    async def greet(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello, and goodbye\n")
        writer.close()

    server = await asyncio.start_server(greet, "127.0.0.1", 0)
    port = int(server.sockets[0].getsockname()[1])
    await declare_port(db, pod["attempt_id"], port)
    try:
        async with launcher_on(db, bus, kube, tmp_path) as launcher:
            await started(launcher, kube, pod)
            answer, end = await launcher.open(kind="forward", port=port, port_label="http", **pod)
            assert answer.ok
            await read_until(end, DATA, b"hello, and goodbye\n")
            async with asyncio.timeout(5):
                assert await end.receive() == (Channel.EOF, b"")  # as the node agent says it
                assert await end.receive() is None
    finally:
        server.close()
        await server.wait_closed()
    assert end.close_reason == ""
