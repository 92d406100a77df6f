"""Real Postgres and real NATS for tests.

Where a Docker engine answers, testcontainers runs both; otherwise (as on our CI
machines) the same local binaries ``make up`` uses. Each test gets its own database,
cloned from a migrated template (fast), and its own NATS server (it starts in ~50 ms),
so tests never see each other's streams or rows.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from corral.local.nats import LocalNats
from corral.local.ports import free_port
from corral.local.postgres import LocalPostgres


def docker_available() -> bool:
    if os.environ.get("CORRAL_TEST_NO_DOCKER") or shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def world_readable_tempdir(prefix: str) -> Path:
    """A temp dir an unprivileged Postgres owner can traverse (pytest's is mode 700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


@dataclass
class PostgresServer:
    """A server we may create databases on; ``url(db)`` names one of them."""

    base_url: str  # ends with "/" — append a database name

    def url(self, database: str) -> str:
        return self.base_url + database


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    if docker_available():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:15", driver=None) as container:
            url = container.get_connection_url()
            yield PostgresServer(url.rsplit("/", 1)[0] + "/")
        return
    directory = world_readable_tempdir("corral-test-pg-")
    os.environ.setdefault("CORRAL_PG_FAST", "1")
    os.environ.setdefault("CORRAL_NATS_FAST", "1")
    server = LocalPostgres(directory, free_port())
    server.start(log_file=directory / "postgres.log")
    try:
        yield PostgresServer(server.url("postgres").rsplit("/", 1)[0] + "/")
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def nats_server() -> Iterator[str]:
    if docker_available():
        from testcontainers.core.container import DockerContainer

        with DockerContainer("nats:2.10").with_command("-js").with_exposed_ports(4222) as c:
            yield f"nats://{c.get_container_host_ip()}:{c.get_exposed_port(4222)}"
        return
    directory = Path(tempfile.mkdtemp(prefix="corral-test-nats-"))
    server = LocalNats(directory, free_port())
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"
