"""A private Corral stack for benchmarks: the same supervisor as ``make up``, its own
Postgres and NATS under a temporary ``CORRAL_HOME``, on free ports."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from corral.local.ports import child_output, free_port
from services.launcher.agent.leftovers import end_tasks_of_home
from shared.bus.identities import ADMIN

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int, *, with_reaped_children: bool = False) -> float:
    """CPU seconds a process has used (utime + stime, from /proc); with its reaped
    children's too (cutime + cstime: the node agent's finished tasks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if with_reaped_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICKS


def tree_cpu_s(root: int) -> float:
    """CPU of a process and its children, live and reaped (Postgres: the postmaster and
    its backends)."""
    total = cpu_s(root, with_reaped_children=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == root:
                    total += (int(fields[11]) + int(fields[12])) / TICKS
            except (OSError, IndexError):
                continue  # gone meanwhile
    return total


@dataclass
class BenchStack:
    home: Path
    port: int
    process: subprocess.Popen[bytes]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def token(self) -> str:
        return (self.home / "admin-token").read_text().strip()

    def database_url(self) -> str:
        from corral.local.postgres import LocalPostgres

        pg_port = int(os.environ.get("BENCH_PG_PORT", "0")) or self._pg_port
        return LocalPostgres(self.home / "postgres", pg_port).url()

    def nats_url(self) -> str:
        """The stack's NATS as its admin (it admits only known users): for the benchmark's
        own publishers and readers, which pass it on in the environment, never in argv."""
        password = (self.home / "credentials" / f"nats-{ADMIN}.password").read_text().strip()
        return f"nats://{ADMIN}:{password}@127.0.0.1:{self._nats_port}"

    def nats_env(self) -> dict[str, str]:
        """Settings that connect a Corral process (a bench's extra exporter) as the admin."""
        return {
            "CORRAL_NATS_URL": f"nats://127.0.0.1:{self._nats_port}",
            "CORRAL_NATS_USER": ADMIN,
            "CORRAL_NATS_PASSWORD_FILE": str(self.home / "credentials" / f"nats-{ADMIN}.password"),
        }

    def postmaster_pid(self) -> int:
        postmaster = next((self.home / "postgres").rglob("postmaster.pid"))
        return int(postmaster.read_text().split()[0])

    def cpu_by_process(self) -> dict[str, float]:
        """CPU seconds so far of each service process (with the tasks it ran and reaped:
        the agent's), of Postgres and of NATS; compare two reads."""
        used = {
            pid_file.stem: cpu_s(int(pid_file.read_text().split()[0]), with_reaped_children=True)
            for pid_file in sorted((self.home / "run").glob("*.pid"))
        }
        used["postgres"] = tree_cpu_s(self.postmaster_pid())
        nats = self.nats_pid()
        if nats is not None and "nats-server" not in used:  # (supervised: its pid file is there)
            used["nats"] = cpu_s(nats)
        return used

    def nats_pid(self) -> int | None:
        """The embedded NATS server: the supervisor's ``nats-server`` child."""
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    name, rest = (entry / "stat").read_text().split(" (", 1)[1].rsplit(")", 1)
                    if name == "nats-server" and int(rest.split()[1]) == self.process.pid:
                        return int(entry.name)
                except (OSError, IndexError, ValueError):
                    continue  # gone meanwhile
        return None

    def wait_for_gpus(self, gpus: int, timeout_s: float = 60.0, nodes: int = 1) -> None:
        """Until ``nodes`` nodes with ``gpus`` GPUs each are READY and take work. Every
        service answers /readyz before a node's first heartbeat has registered it (about
        half a second later), and a job submitted in between waits for the node, not for
        Corral."""
        headers = {"Authorization": f"Bearer {self.token()}"}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            listed = httpx.get(f"{self.base_url}/api/v1/nodes", headers=headers, timeout=5).json()["items"]
            ready = [n for n in listed if n["state"] == "READY" and not n["drained"]]
            if sum(1 for n in ready if n["gpu_count"] >= gpus) >= nodes:
                return
            time.sleep(0.05)
        raise RuntimeError(f"fewer than {nodes} READY node(s) with {gpus} GPUs after {timeout_s:.0f} s")

    _pg_port: int = 0
    _nats_port: int = 0


# The supervisor's words when a port it was given is taken (corral/local/ports.py).
_PORT_TAKEN = "is already in use"
START_ATTEMPTS = 3


class PortTaken(RuntimeError):
    """A port chosen free was taken before the stack bound it."""


@contextmanager
def private_stack(
    *, gpus: int = 8, nodes: int = 1, extra_env: dict[str, str] | None = None, keep: bool = False
) -> Iterator[BenchStack]:
    """Start the stack, with ``nodes`` simulated nodes of ``gpus`` GPUs each; ``keep``
    leaves its home (logs, data) behind for a post-mortem.

    Its ports are chosen free, but another process may take one before the stack binds
    it (any outgoing connection of the machine gets a port of the same ephemeral range):
    then the start is tried again on fresh ports, up to ``START_ATTEMPTS`` times."""
    for attempt in range(1, START_ATTEMPTS + 1):
        stack = _start(gpus, nodes, extra_env)
        try:
            _wait_ready(stack)
        except PortTaken:
            _stop(stack, keep=False)
            if attempt == START_ATTEMPTS:
                raise
            continue
        except BaseException:
            _stop(stack, keep)
            raise
        break
    try:
        yield stack
    finally:
        _stop(stack, keep)


def _start(gpus: int, nodes: int, extra_env: dict[str, str] | None) -> BenchStack:
    home = Path(tempfile.mkdtemp(prefix="corral-bench-"))
    home.chmod(0o755)  # a root-started private Postgres runs as an unprivileged user
    port, pg_port, nats_port = free_port(), free_port(), free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")},
        "CORRAL_HOME": str(home),
        "CORRAL_PORT": str(port),
        "CORRAL_PG_PORT": str(pg_port),
        "CORRAL_NATS_PORT": str(nats_port),
        "CORRAL_SIMULATED_GPUS": str(gpus),
        "CORRAL_SIMULATED_NODES": str(nodes),
        "CORRAL_TELEMETRY_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
        # A benchmark's clients are one tenant submitting as fast as it can: the per-token
        # rate limits (a protection for shared API processes) would measure themselves.
        "CORRAL_API_RATE_LIMIT_PER_S": "0",
        "CORRAL_API_SUBMIT_RATE_LIMIT_PER_S": "0",
        **(extra_env or {}),
    }
    with child_output(home / "supervisor.log") as log:
        process = subprocess.Popen([sys.executable, "-m", "corral", "up"], env=env, stdout=log, stderr=log)
    stack = BenchStack(home, port, process)
    stack._pg_port = pg_port
    stack._nats_port = nats_port
    return stack


def _stop(stack: BenchStack, keep: bool) -> None:
    stack.process.send_signal(signal.SIGINT)
    try:
        stack.process.wait(60)
    except subprocess.TimeoutExpired:
        stack.process.kill()
        stack.process.wait()
    try:
        # Its agents leave their tasks running for the next agent; no stack of this home comes next.
        end_tasks_of_home(stack.home)
    finally:
        if keep:
            print(f"stack home kept at {stack.home}", file=sys.stderr)
        else:
            shutil.rmtree(stack.home, ignore_errors=True)


def _wait_ready(stack: BenchStack, timeout_s: float = 90.0) -> None:
    """Every service started answers /readyz (the API on its port, the others on theirs)."""
    deadline = time.monotonic() + timeout_s
    ports_file = stack.home / "run" / "health-ports.json"
    while time.monotonic() < deadline:
        if stack.process.poll() is not None:
            said = (stack.home / "supervisor.log").read_text()[-2000:]
            raise (PortTaken if _PORT_TAKEN in said else RuntimeError)(f"the stack exited: {said}")
        try:
            ports = json.loads(ports_file.read_text()) if ports_file.exists() else {}
            if ports and all(
                httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
                for port in ports.values()
            ):
                return
        except (httpx.TransportError, json.JSONDecodeError):
            pass
        time.sleep(0.2)
    raise RuntimeError("the stack did not become ready")
