"""The launcher's start waits for every worker's sshd (services/launcher/agent/mpi/barrier.py)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from services.launcher.agent.mpi.barrier import BarrierTimeout, SshTarget, answers, wait_for_sshds


async def _serve(reply: bytes, port: int = 0) -> tuple[asyncio.Server, int]:
    async def greet(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(reply)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(greet, "127.0.0.1", port)
    return server, server.sockets[0].getsockname()[1]


ServerStarter = Callable[[bytes], Awaitable[int]]


@pytest.fixture
async def sshd_like() -> AsyncIterator[Callable[[bytes], Awaitable[int]]]:
    servers: list[asyncio.Server] = []

    async def start(reply: bytes) -> int:
        server, port = await _serve(reply)
        servers.append(server)
        return port

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_it_passes_once_every_worker_sends_an_ssh_banner(sshd_like: ServerStarter) -> None:
    ports = [await sshd_like(b"SSH-2.0-OpenSSH_9.2\r\n") for _ in range(2)]
    targets = [SshTarget(f"worker-{i}", "127.0.0.1", port) for i, port in enumerate(ports)]
    assert await wait_for_sshds(targets, 5, lambda: False)


async def test_a_port_that_answers_something_else_is_not_an_sshd(sshd_like: ServerStarter) -> None:
    port = await sshd_like(b"HTTP/1.1 400 Bad Request\r\n")
    assert not await answers(SshTarget("worker-0", "127.0.0.1", port))


async def test_it_waits_for_a_worker_whose_sshd_starts_later() -> None:
    port = _free_port()
    later: list[asyncio.Server] = []

    async def start_late() -> None:
        await asyncio.sleep(0.5)
        server, _ = await _serve(b"SSH-2.0-late\r\n", port)
        later.append(server)

    starting = asyncio.create_task(start_late())
    begun = time.monotonic()
    assert await wait_for_sshds([SshTarget("worker-0", "127.0.0.1", port)], 5, lambda: False)
    assert 0.5 <= time.monotonic() - begun < 2
    await starting
    later[0].close()
    await later[0].wait_closed()


async def test_the_timeout_names_the_worker_and_where_to_look(sshd_like: ServerStarter) -> None:
    up = await sshd_like(b"SSH-2.0-OpenSSH_9.2\r\n")
    down = _free_port()
    targets = [SshTarget("worker-0", "127.0.0.1", up), SshTarget("worker-1", "127.0.0.1", down)]
    begun = time.monotonic()
    with pytest.raises(BarrierTimeout) as raised:
        await wait_for_sshds(targets, 1, lambda: False)
    assert 1 <= time.monotonic() - begun < 2
    assert str(raised.value) == (
        f"ssh barrier: worker-1 (127.0.0.1:{down}) did not answer within 1 s; check that worker's log"
    )


async def test_a_stop_ends_the_wait() -> None:
    asked: list[bool] = []

    async def ask_later() -> None:
        await asyncio.sleep(0.3)
        asked.append(True)

    asking = asyncio.create_task(ask_later())
    begun = time.monotonic()
    assert not await wait_for_sshds(
        [SshTarget("worker-0", "127.0.0.1", _free_port())], 30, lambda: bool(asked)
    )
    assert time.monotonic() - begun < 1
    await asking
