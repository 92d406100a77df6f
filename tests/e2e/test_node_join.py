"""A second machine joins as a node with a one-time token, runs work with nothing shared
but the network, and is cut off when removed: two homes on this machine, real processes,
the control plane's own Postgres and NATS (both over TLS, as they listen beyond
loopback)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from corral.local.ports import child_output, free_port
from services.launcher.agent.leftovers import end_tasks_of_home
from shared.bus.nats import NatsBus
from shared.bus.protocol import ConsumerConfig
from shared.settings import NatsSettings
from tests.e2e.stack import FAST_LOOPS, HOLD, Stack, corral, submit, wait_state


def _postgres_with_tls() -> Path | None:
    """A PostgreSQL built with OpenSSL on this machine (Debian's), for a control plane
    whose Postgres listens beyond loopback; the one Corral ships has no TLS."""
    for bindir in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        config = bindir / "pg_config"
        if (
            config.exists()
            and "--with-openssl"
            in subprocess.run([config, "--configure"], capture_output=True, text=True).stdout
        ):
            return bindir
    return None


def _node_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    return {**env, **FAST_LOOPS, "CORRAL_HOME": str(home), "CORRAL_EXPORTER_SIMULATED_GPUS": "2"}


def _join(stack: Stack, home: Path, token: str, node_id: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "corral",
        "join",
        "--api",
        stack.base_url,
        "--token",
        token,
        "--node-id",
        node_id,
    ]
    return subprocess.run(command, env=_node_env(home), capture_output=True, text=True, timeout=60)


async def _node_state(http: httpx.AsyncClient, node_id: str) -> str | None:
    nodes = (await http.get("/api/v1/nodes")).json()["items"]
    return next((n["state"] for n in nodes if n["id"] == node_id), None)


async def _wait_node(http: httpx.AsyncClient, node_id: str, states: set[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await _node_state(http, node_id) in states:
            return
        await asyncio.sleep(0.3)
    raise AssertionError(
        f"node {node_id} not {states} within {timeout_s}s: {await _node_state(http, node_id)}"
    )


async def test_a_machine_joins_with_a_token_runs_work_and_is_cut_off_when_removed(tmp_path: Path) -> None:
    control = {
        "CORRAL_PG_PORT": str(free_port()),
        "CORRAL_NATS_PORT": str(free_port()),
        # Beyond loopback, as for a machine elsewhere: TLS, with the stack's CA.
        "CORRAL_NATS_HOST": "0.0.0.0",
        "CORRAL_SIMULATED_GPUS": "1",
    }
    postgres_tls = _postgres_with_tls()
    if postgres_tls is not None:  # (else the node reaches Postgres through its socket)
        control |= {"CORRAL_PG_HOST": "0.0.0.0", "CORRAL_PG_BINDIR": str(postgres_tls)}
    far_home = tmp_path / "far"
    async with Stack(tmp_path / "control", control).running() as stack, stack.client() as http:
        made = corral(stack, "join-token", "--json")
        assert made.returncode == 0, made.stderr
        token = httpx.Response(200, content=made.stdout).json()["token"]

        joined = _join(stack, far_home, token, "far")
        assert joined.returncode == 0, joined.stderr
        assert f"CORRAL_HOME={far_home.resolve()} corral up" in joined.stdout
        settings = (far_home / "node.env").read_text()
        assert "CORRAL_NATS_URL=tls://" in settings
        assert "CORRAL_NATS_CA_FILE=" in settings
        # The node agents' login over TCP, the server's certificate checked against the CA
        database_url = next(line for line in settings.splitlines() if line.startswith("CORRAL_DATABASE_URL="))
        if postgres_tls is not None:
            assert "@127.0.0.1:" in database_url
            assert "sslmode=verify-full&sslrootcert=" in database_url
        for secret in (far_home / "credentials").iterdir():
            if secret.suffix != ".pem":
                assert secret.stat().st_mode & 0o777 == 0o600, secret
                assert secret.read_text().strip() not in settings  # files, never the settings
        again = _join(stack, tmp_path / "other", token, "other")
        assert again.returncode != 0
        assert "used already or has expired" in again.stderr

        # The node's machine: `corral up` in its home and nothing else, none of the
        # control plane's files (its own logs, work and state directories).
        with child_output(far_home / "up.log") as log:
            far = subprocess.Popen(  # noqa: ASYNC220  (a machine of its own, for the whole test)
                [sys.executable, "-m", "corral", "up"],
                env=_node_env(far_home),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            await _wait_node(http, "far", {"READY"})
            assert (
                await http.post("/api/v1/nodes/local/drain", json={"reason": "only far"})
            ).status_code == 202
            job_id = await submit(http, "echo ran on $(hostname) as node far", name="far")
            job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"}, timeout_s=60)
            assert job["state"] == "SUCCEEDED", job
            assert job["attempts"][0]["node_id"] == "far"
            assert "as node far" in (await http.get(f"/api/v1/jobs/{job_id}/logs")).text

            held = await submit(http, HOLD, name="held")
            await wait_state(http, held, {"RUNNING"}, timeout_s=60)
            removed = corral(stack, "remove-node", "far")
            assert removed.returncode == 0, removed.stderr
            # Cut off: its task is handled as a lost node's once the lease runs out, and
            # its agent says why it cannot reach the bus.
            job = await wait_state(http, held, {"PENDING", "FAILED", "SCHEDULED"}, timeout_s=60)
            assert job["attempts"][0]["state"] == "LOST", job["attempts"]
            await _wait_node(http, "far", {"UNREACHABLE", "LOST", "DOWN"})
            agent_log = (far_home / "logs" / "services" / "agent.log").read_text()
            assert "NATS refused user 'node-far'" in agent_log
        finally:
            far.send_signal(signal.SIGINT)
            try:
                far.wait(30)
            except subprocess.TimeoutExpired:
                far.kill()
                far.wait()
            # The held task outlives its cut-off agent, as a real one would until the
            # machine is cleaned up; no agent of this home comes back to end it.
            end_tasks_of_home(far_home)


async def test_an_integrator_reads_the_job_stream_with_minted_credentials_until_revoked(
    tmp_path: Path,
) -> None:
    control = {"CORRAL_PG_PORT": str(free_port()), "CORRAL_NATS_PORT": str(free_port())}
    async with Stack(tmp_path / "control", control).running() as stack, stack.client() as http:
        job_id = await submit(http, "echo for the dashboards")
        await wait_state(http, job_id, {"SUCCEEDED"}, timeout_s=60)
        minted = corral(stack, "bus-credentials", "dashboards", "--stream", "jobs", "--json")
        assert minted.returncode == 0, minted.stderr
        given = json.loads(minted.stdout)
        assert given["user"] == "integrator-dashboards"
        assert given["streams"] == ["CORRAL_JOBS"]
        secret = tmp_path / "dashboards.password"
        secret.write_text(given["password"])
        secret.chmod(0o600)
        settings = NatsSettings(
            url=given["url"], user=given["user"], password_file=secret, connect_timeout_s=5
        )
        # Admitted once the stack has reloaded NATS's users (within a second or so): until
        # then the client is refused and tries again by itself.
        reader = await asyncio.wait_for(NatsBus.connect(settings), 30)
        try:
            config = ConsumerConfig(
                stream="CORRAL_JOBS",
                durable=given["consumer"],
                filter_subjects=("corral.job.>",),
                deliver_all=True,
            )
            subscription = await reader.subscribe(config)
            subjects: list[str] = []
            while batch := await subscription.fetch(50, timeout_s=1.0):
                subjects += [d.subject for d in batch]
            assert f"corral.job.succeeded.{job_id}" in subjects
            revoked = corral(stack, "bus-credentials", "dashboards", "--revoke")
            assert revoked.returncode == 0, revoked.stderr
            for _ in range(50):
                if not reader.nc.is_connected:
                    break
                await asyncio.sleep(0.2)
            assert not reader.nc.is_connected, "a revoked integrator must be cut off"
        finally:
            await reader.close()
