"""Every service is a process that serves health, stops cleanly on SIGTERM, and exits
non-zero when one of its root tasks dies (so its supervisor restarts it)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from corral.local.ports import free_port

SERVICES = [
    "services.api",
    "services.scheduler",
    "services.launcher",
    "services.monitor",
    "services.alerter",
    "services.launcher.agent",
    "services.monitor.exporter",
]


def _start(module: str, database_url: str, nats_url: str, port: int, tmp: str) -> subprocess.Popen[bytes]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")},
        "CORRAL_DATABASE_URL": database_url,
        "CORRAL_NATS_URL": nats_url,
        "CORRAL_HOME": tmp,
        "CORRAL_HEALTH_PORT": str(port),
        "CORRAL_API_PORT": str(port),
    }
    return subprocess.Popen(
        [sys.executable, "-m", module], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


async def _wait_ready(port: int, proc: subprocess.Popen[bytes]) -> dict[str, object]:
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=2) as http:
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[0].decode()
            try:
                health = await http.get("/healthz")
                ready = await http.get("/readyz")
                if health.status_code == 200 and ready.status_code == 200:
                    body: dict[str, object] = ready.json()
                    return body
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("service never became ready")


@pytest.mark.slow
@pytest.mark.parametrize("module", SERVICES)
async def test_service_serves_health_and_stops_cleanly_on_sigterm(
    module: str, database_url: str, nats_url: str, tmp_path: object
) -> None:
    port = free_port()
    proc = _start(module, database_url, nats_url, port, str(tmp_path))
    try:
        ready = await _wait_ready(port, proc)
        assert ready["ready"] is True
        proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(proc.wait, 15)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"{module} ignored SIGTERM:\n{proc.communicate()[0].decode()}") from None
        output = proc.communicate()[0].decode()
        assert code == 0, output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_a_dead_root_task_exits_non_zero(database_url: str, nats_url: str, tmp_path: object) -> None:
    # Occupy the health port: the health root task cannot serve and dies.
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        proc = _start("services.scheduler", database_url, nats_url, port, str(tmp_path))
        code = await asyncio.to_thread(proc.wait, 30)
        output = proc.communicate()[0].decode()
    assert code == 1, output
    assert "a root task died" in output
