"""`make up` heals its own servers: SIGKILL its `nats-server` or its Postgres postmaster and
the supervisor reaps and restarts it, every service carries on without a restart of its
own, and the figures the stack promises hold (an SSE event within 5 s of a NATS kill, a
submit within 10 s of a Postgres kill).

One stack for the module (it takes a while to start): the NATS case runs first, then the
Postgres case, then what an operator is shown of both.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from corral.local.ports import free_port
from shared.bus.nats import NatsBus
from shared.bus.streams import ALERTS, JOBS, NODES
from tests.e2e.stack import Stack, submit, wait_state
from tests.infra import world_readable_tempdir

pytestmark = pytest.mark.asyncio(loop_scope="module")

NATS_RECOVERY_S = 5.0
_NO_READ_TIMEOUT = httpx.Timeout(5, read=None)  # an idle event stream is no failure
POSTGRES_RECOVERY_S = 10.0


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    path = world_readable_tempdir("corral-heal-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(home: Path) -> AsyncIterator[Stack]:
    servers = {"CORRAL_PG_PORT": str(free_port()), "CORRAL_NATS_PORT": str(free_port())}
    async with Stack(home, servers).running() as running:
        yield running


class SseWatcher:
    """An SSE client as an integrator writes one: it follows ``/api/v1/events`` and, when
    the stream breaks, reconnects with the ``Last-Event-ID`` of the last event it saw."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.seen: dict[str, float] = {}  # "type job-id" -> when it arrived
        self.reconnects = 0
        self._last_id: str | None = None

    async def run(self) -> None:
        while True:
            headers = {"Authorization": f"Bearer {self.stack.token()}"}
            if self._last_id:
                headers["Last-Event-ID"] = self._last_id
            try:
                async with (
                    httpx.AsyncClient(
                        base_url=self.stack.base_url, timeout=httpx.Timeout(5, read=None)
                    ) as http,
                    http.stream("GET", "/api/v1/events", headers=headers) as response,
                ):
                    if response.status_code != 200:
                        raise httpx.TransportError(f"answered {response.status_code}")
                    await self._read(response)
            except httpx.HTTPError:
                pass
            self.reconnects += 1
            await asyncio.sleep(0.2)

    async def _read(self, response: httpx.Response) -> None:
        event_type = ""
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                self._last_id = line[4:]
            elif line.startswith("event: "):
                event_type = line[7:]
            elif line.startswith("data: ") and event_type:
                subject = json.loads(line[6:]).get("subject", "")
                self.seen.setdefault(f"{event_type} {subject}", time.monotonic())

    async def wait_for(self, key: str, timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        while key not in self.seen and time.monotonic() < deadline:  # noqa: ASYNC110 (a test's poll)
            await asyncio.sleep(0.02)
        assert key in self.seen, f"no {key} on the SSE stream within {timeout_s:.0f} s"
        return self.seen[key]


def _pid(stack: Stack, name: str) -> int:
    return int((stack.home / "run" / f"{name}.pid").read_text())


async def _consumers(stack: Stack) -> set[str]:
    """The durable consumers of the lifecycle streams."""
    bus = await NatsBus.connect(stack.admin_nats(), name="test-consumers")
    try:
        names: set[str] = set()
        for stream in (JOBS.name, NODES.name, ALERTS.name):
            infos = await bus.js.consumers_info(stream)
            names |= {f"{stream}/{c.name}" for c in infos if c.config.durable_name}  # (not the SSE tails)
        return names
    finally:
        await bus.close()


async def _new_pid(stack: Stack, name: str, old: int, timeout_s: float = 20.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            pid = _pid(stack, name)
            if pid != old:
                return pid
        except (FileNotFoundError, ValueError):
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} was not restarted within {timeout_s:.0f} s:\n{stack.logs('supervisor')}")


async def test_a_killed_nats_server_restarts_on_its_store_and_events_flow_within_5_s(
    stack: Stack,
) -> None:
    watcher = SseWatcher(stack)
    following = asyncio.create_task(watcher.run())
    try:
        async with stack.client() as http:
            warm = await submit(http, "true")
            await watcher.wait_for(f"corral.job.succeeded.v1 {warm}", 30)
            durable = await _consumers(stack)
            assert durable, "the services' durable consumers exist before the kill"

            old = _pid(stack, "nats-server")
            os.kill(old, signal.SIGKILL)
            killed = time.monotonic()
            # Submits need Postgres alone: the job is recorded now, its events follow.
            job_id = await submit(http, "true")
            arrived = await watcher.wait_for(f"corral.job.submitted.v1 {job_id}", 30)
            recovery_s = arrived - killed
            print(f"NATS SIGKILL -> event on the SSE stream: {recovery_s:.2f} s")
            assert recovery_s <= NATS_RECOVERY_S

            assert await _new_pid(stack, "nats-server", old) != old
            assert durable <= await _consumers(stack), "streams and durable consumers survive on the store"
            await wait_state(http, job_id, {"SUCCEEDED"}, timeout_s=30)
            await watcher.wait_for(f"corral.job.succeeded.v1 {job_id}", 10)
    finally:
        following.cancel()
    assert "nats-server exited (killed by signal 9); restarting" in stack.logs("supervisor")


async def test_a_killed_postmaster_recovers_and_a_submit_succeeds_within_10_s(stack: Stack) -> None:
    """The job submitted after the crash runs to its end: the outbox relay, the scheduler's
    leader lock, the launcher and the agent's lease all came back by themselves."""
    services_before = {name: _pid(stack, name) for name in ("api", "scheduler", "launcher", "agent")}
    old = _pid(stack, "postgres")
    async with stack.client() as http:
        os.kill(old, signal.SIGKILL)
        killed = time.monotonic()
        key = str(uuid.uuid4())
        job_id = None
        while job_id is None and time.monotonic() - killed < 30:
            try:
                answer = await http.post(
                    "/api/v1/jobs",
                    json={"name": "after-crash", "tasks": [{"name": "main", "command": "echo recovered"}]},
                    headers={"Idempotency-Key": key},
                )
                if answer.status_code == 201:
                    job_id = answer.json()["id"]
                else:
                    assert answer.status_code == 503, answer.text  # never a 500
            except httpx.TransportError:
                pass
            if job_id is None:
                await asyncio.sleep(0.1)
        recovery_s = time.monotonic() - killed
        print(f"Postgres SIGKILL -> a submit succeeds: {recovery_s:.2f} s")
        assert job_id is not None
        assert recovery_s <= POSTGRES_RECOVERY_S
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"}, timeout_s=60)
        assert job["state"] == "SUCCEEDED"
        assert (await http.get(f"/api/v1/jobs/{job_id}/logs")).text == "recovered\n"
    assert await _new_pid(stack, "postgres", old) != old
    assert "redo" in (stack.home / "logs" / "postgres.log").read_text(), "it recovered from its WAL"
    services_after = {name: _pid(stack, name) for name in services_before}
    assert services_after == services_before, "no service needed a restart"


async def test_operators_see_each_server_restarted_with_its_last_exit(stack: Stack) -> None:
    async with stack.client() as http:
        view = (await http.get("/api/v1/service-instances")).json()
    servers = {p["name"]: p for p in view["supervised"] if p["kind"] == "server"}
    assert set(servers) == {"postgres", "nats-server"}
    for server in servers.values():
        assert server["state"] == "running"
        assert server["restarts"] >= 1
        assert server["last_exit"] == "killed by signal 9"
    assert {p["name"] for p in view["supervised"] if p["kind"] == "service"} >= {"api", "scheduler", "agent"}

    shown = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "corral",
        "--url",
        stack.base_url,
        "--token",
        stack.token(),
        "instances",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await shown.communicate()
    lines = out.decode().splitlines()
    postgres = next(line for line in lines if line.startswith("postgres "))
    for shown_field in ("server", "running", "killed by signal 9"):
        assert shown_field in postgres, out.decode()
