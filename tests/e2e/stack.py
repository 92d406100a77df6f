"""A whole Corral stack as real processes, started by the same supervisor as ``make up``."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from corral.local.bus_users import password_file
from corral.local.ports import child_output, free_port
from services.launcher.agent.leftovers import end_tasks_of_home
from shared.bus.identities import ADMIN
from shared.settings import NatsSettings

# Short intervals keep the fault tests quick; they are the knobs a user would turn too.
FAST_LOOPS = {
    "CORRAL_SCHEDULER_CYCLE_INTERVAL_S": "0.5",
    "CORRAL_SCHEDULER_LEADER_RETRY_S": "0.5",
    "CORRAL_LAUNCHER_RECONCILE_INTERVAL_S": "1",
    "CORRAL_AGENT_RECONCILE_INTERVAL_S": "1",
    "CORRAL_AGENT_LEASE_S": "3",
    "CORRAL_MONITOR_FLUSH_INTERVAL_S": "0.2",
    "CORRAL_MONITOR_TOUCH_INTERVAL_S": "1",
    "CORRAL_MONITOR_READINGS_INTERVAL_S": "1",
    "CORRAL_ALERTER_ROUTING_CHECK_S": "0.3",
    "CORRAL_ALERTER_DELIVERY_LEASE_S": "2",
    "CORRAL_ALERTER_CONDITIONS_CHECK_S": "1",
    "CORRAL_HEALTH_LIVENESS_INTERVAL_S": "1",
}


@dataclass
class Stack:
    home: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    node_homes: set[Path] = field(default_factory=set)  # of the nodes started with a home of their own
    node_processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            **FAST_LOOPS,
            **self.env,
            "CORRAL_HOME": str(self.home),
            "CORRAL_PORT": str(self.port),
        }

    def start(self) -> None:
        env = self._env()
        self.home.mkdir(parents=True, exist_ok=True)
        with child_output(self.home / "supervisor.log") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "corral", "up"], env=env, stdout=log, stderr=subprocess.STDOUT
            )

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Stack]:
        """Started and ready for the block; stopped at its end, which must be clean (exit 0),
        and its tasks ended: they would hold their ports into the next test's stack."""
        self.start()
        try:
            await self.wait_ready()
            yield self
        finally:
            code = self.stop()
            try:
                self._end_nodes()
            finally:
                assert code == 0, f"supervisor exited {code}:\n{self.logs('supervisor')}"

    def _end_nodes(self) -> None:
        """Stop the processes ``start_node`` started, then end every task of the stack's
        homes (their agents leave them running for the next agent, and none comes)."""
        for process in self.node_processes:
            process.terminate()
        for process in self.node_processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for home in (self.home, *self.node_homes):
            end_tasks_of_home(home, state_dir=_path_or_none(self._env().get("CORRAL_AGENT_STATE_DIR")))

    def stop(self, timeout_s: float = 30.0) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def start_node(
        self,
        node_id: str,
        gpus: int = 8,
        *,
        home: Path | None = None,
        modules: tuple[str, ...] = ("services.launcher.agent", "services.monitor.exporter"),
    ) -> list[subprocess.Popen[bytes]]:
        """A second machine's processes (node agent + exporter), as an operator would run them;
        with ``home``, a machine of its own: its logs, work and state under it, not the stack's."""
        if home is not None:
            self.node_homes.add(home)
        home = home or self.home
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")},
            **FAST_LOOPS,
            **self.env,
            "CORRAL_HOME": str(home),
            "CORRAL_AGENT_NODE_ID": node_id,
            "CORRAL_EXPORTER_NODE_ID": node_id,
            "CORRAL_EXPORTER_ADDRESS": "127.0.0.1",
            "CORRAL_EXPORTER_SIMULATED_GPUS": str(gpus),
            "CORRAL_HEALTH_PORT": "0",
        }
        processes = []
        for module in modules:
            with child_output(home / "logs" / "services" / f"{node_id}-{module}.log") as log:
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", module], env=env, stdout=log, stderr=subprocess.STDOUT
                    )
                )
        self.node_processes += processes
        return processes

    def admin_nats(self) -> NatsSettings:
        """How a test reaches the stack's NATS as its admin (the stack's own NATS admits
        only known identities); an external NATS, as it is."""
        if "CORRAL_NATS_URL" in self.env:
            return NatsSettings(url=self.env["CORRAL_NATS_URL"])
        return NatsSettings(
            url=(self.home / "run" / "nats-url").read_text().strip(),
            user=ADMIN,
            password_file=password_file(self.home, ADMIN),
        )

    def pid(self, service: str) -> int:
        return int((self.home / "run" / f"{service}.pid").read_text())

    def kill(self, service: str) -> int:
        """SIGKILL one service, as a crash would; the supervisor restarts it."""
        pid = self.pid(service)
        os.kill(pid, signal.SIGKILL)
        return pid

    async def wait_restarted(self, service: str, old_pid: int, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self.pid(service) != old_pid:
                    return
            except (FileNotFoundError, ValueError):
                pass
            await asyncio.sleep(0.1)
        raise AssertionError(f"{service} was not restarted within {timeout_s}s")

    def release(self, job_id: str) -> None:
        """Let a HOLD task finish (it polls for this file in its working directory)."""
        work = self.home / "work" / job_id
        work.mkdir(parents=True, exist_ok=True)
        (work / "release").touch()

    def token(self) -> str:
        return (self.home / "admin-token").read_text().strip()

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.base_url, headers={"Authorization": f"Bearer {self.token()}"}, timeout=10
        )

    async def wait_ready(self, timeout_s: float = 60.0) -> None:
        """The API answers and the node has registered its GPUs."""
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(base_url=self.base_url, timeout=2) as http:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise AssertionError(f"supervisor exited: {self.logs('supervisor')}")
                try:
                    if (await http.get("/readyz")).status_code == 200 and await self._node_registered():
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.2)
        raise AssertionError(f"stack not ready in {timeout_s}s:\n{self.startup_report()}")

    async def _node_registered(self) -> bool:
        url = self.env.get("CORRAL_DATABASE_URL")
        if url is None:
            return True  # private servers: jobs simply wait in PENDING until the node is in
        conn = await asyncpg.connect(url)
        try:
            return bool(await conn.fetchval("SELECT count(*) FROM monitor.nodes WHERE state = 'READY'"))
        finally:
            await conn.close()

    async def wait_nodes_ready(self, count: int, timeout_s: float = 20.0) -> None:
        """``count`` nodes are READY and each agent holds its lease (its tasks can start)."""
        conn = await asyncpg.connect(self.env["CORRAL_DATABASE_URL"])
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                ready = await conn.fetchval(
                    "SELECT count(*) FROM monitor.nodes n JOIN launcher.agents a ON a.node_id = n.id "
                    "WHERE n.state = 'READY' AND a.lost_at IS NULL"
                )
                if ready == count:
                    return
                await asyncio.sleep(0.1)
        finally:
            await conn.close()
        raise AssertionError(f"{count} nodes were not ready within {timeout_s}s")

    def startup_report(self) -> str:
        """The supervisor's log, and the end of each service's log that it says exited or
        failed: what a stack that never became ready left behind."""
        said = self.logs("supervisor")
        exited = sorted(set(re.findall(r"^(\S+) (?:exited|failed) \(", said, re.MULTILINE)))
        tails = [f"--- the end of {name}'s log:\n{self.logs(name)[-2500:]}" for name in exited]
        return "\n".join([said, *tails])

    def logs(self, service: str) -> str:
        path = self.home / ("supervisor.log" if service == "supervisor" else f"logs/services/{service}.log")
        try:
            return path.read_text(errors="replace")[-5000:]
        except FileNotFoundError:
            return ""


# A task that runs until the test lets it go: `stack.release(job_id)`.
HOLD = "until [ -f release ]; do sleep 0.05; done; echo released"


def _path_or_none(value: str | None) -> Path | None:
    return Path(value) if value else None


async def submit(
    http: httpx.AsyncClient, command: str, *, gpus: int = 1, name: str = "hello", **extra: Any
) -> str:
    """Submit a one-task job; ``extra`` adds job-level fields (retry, max_runtime_s...)."""
    spec = {
        "name": name,
        "tasks": [{"name": "main", "instances": 1, "command": command, "resources": {"gpus": gpus}}],
        **extra,
    }
    return await submit_spec(http, spec)


async def submit_spec(http: httpx.AsyncClient, spec: dict[str, Any]) -> str:
    response = await http.post("/api/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    job_id: str = response.json()["id"]
    return job_id


async def wait_state(
    http: httpx.AsyncClient, job_id: str, states: Iterable[str], timeout_s: float = 30.0
) -> dict[str, Any]:
    wanted = set(states)
    deadline = time.monotonic() + timeout_s
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
        if job["state"] in wanted:
            return job
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} stayed {job.get('state')}, wanted {sorted(wanted)}: {job}")


def corral(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``corral`` command as a user runs it, against this stack."""
    env = {**os.environ, "CORRAL_URL": stack.base_url, "CORRAL_TOKEN": stack.token()}
    return subprocess.run(  # our own CLI
        [sys.executable, "-m", "corral", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
