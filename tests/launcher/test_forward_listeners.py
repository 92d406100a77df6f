"""A forward reaches a port only when the socket listening on it is the task's own.

Tasks share the node's network, so another tenant's process may bind a port allocated
to a task; the agent reads the kernel's tables of listening sockets and the task's
descriptors (``listeners``) and refuses a forward to a port someone else listens on.
The tables' lines are read from recorded samples; ownership from real sockets and real
processes, and the forward itself through a real agent and a real sandboxed task.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.launcher.agent.interactive.listeners import (
    Listener,
    listening_sockets,
    owner_of_port,
    parse_table_line,
)
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from tests.launcher.interactive_clients import open_session, running_node

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")
little_endian = pytest.mark.skipif(sys.byteorder != "little", reason="the samples were recorded on x86-64")

TCP_HEADING = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
)
TCP_LISTENING = (
    "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 2476036 1 "
    "0000000074565dfb 100 0 0 10 0"
)
TCP_ESTABLISHED = (
    "   3: 0100007F:1F90 0100007F:D2F4 01 00000000:00000000 00:00000000 00000000  1000        0 2476101 1 "
    "00000000a1b2c3d4 20 4 30 10 -1"
)
TCP6_ANY = (
    "   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000     0        0 17431 1 0000000000000000 100 0 0 10 0"
)
TCP6_MAPPED_LOOPBACK = (
    "   1: 0000000000000000FFFF00000100007F:1F90 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000  1001        0 2499120 1 0000000000000000 100 0 0 10 0"
)
TCP6_LOOPBACK = (
    "   2: 00000000000000000000000001000000:0CEA 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000  1001        0 2499133 1 0000000000000000 100 0 0 10 0"
)


@little_endian
def test_a_listening_line_gives_its_address_port_and_inode() -> None:
    assert parse_table_line(TCP_LISTENING, socket.AF_INET) == Listener("127.0.0.1", 8080, 2476036)
    assert parse_table_line(TCP6_ANY, socket.AF_INET6) == Listener("::", 22, 17431)
    assert parse_table_line(TCP6_MAPPED_LOOPBACK, socket.AF_INET6) == Listener(
        "::ffff:127.0.0.1", 8080, 2499120
    )
    assert parse_table_line(TCP6_LOOPBACK, socket.AF_INET6) == Listener("::1", 3306, 2499133)


def test_the_heading_other_states_and_unreadable_lines_are_no_listeners() -> None:
    assert parse_table_line(TCP_HEADING, socket.AF_INET) is None
    assert parse_table_line(TCP_ESTABLISHED, socket.AF_INET) is None
    assert parse_table_line(TCP_LISTENING.replace("0100007F", "01Z0007F"), socket.AF_INET) is None
    assert parse_table_line("   0: 0100007F:1F90 00000000:0000 0A", socket.AF_INET) is None


def test_the_tables_are_read_from_the_proc_given(tmp_path: Path) -> None:
    (tmp_path / "net").mkdir()
    other_port = TCP_LISTENING.replace(":1F90", ":1F91").replace("2476036", "2476037")
    on_another_address = TCP_LISTENING.replace("0100007F", "0200000A").replace("2476036", "2476038")
    lines = [TCP_HEADING, TCP_LISTENING, TCP_ESTABLISHED, other_port, on_another_address]
    (tmp_path / "net" / "tcp").write_text("\n".join(lines) + "\n")
    (tmp_path / "net" / "tcp6").write_text("\n".join([TCP_HEADING, TCP6_MAPPED_LOOPBACK]) + "\n")
    expected = {2476036, 2499120} if sys.byteorder == "little" else set()
    assert listening_sockets(8080, tmp_path) == expected  # (10.0.0.2 is not reached at 127.0.0.1)


@pytest.fixture
def listening_here() -> Iterator[socket.socket]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener


def test_a_port_is_owned_by_the_processes_holding_its_listening_socket(listening_here: socket.socket) -> None:
    port = int(listening_here.getsockname()[1])
    inode = os.fstat(listening_here.fileno()).st_ino
    assert owner_of_port(port, [os.getpid()]) == ("task", {inode})
    assert owner_of_port(port, []) == ("other", {inode})
    with subprocess.Popen(["sleep", "30"]) as stranger:
        try:
            assert owner_of_port(port, [stranger.pid]) == ("other", {inode})
        finally:
            stranger.kill()
    listening_here.close()
    assert owner_of_port(port, [os.getpid()]) == ("nobody", set())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@dataclass
class Stranger:
    """A server outside every task, on a port it bound first."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def log_lines(self) -> int:
        return self.log.read_text().count("\n")


@pytest.fixture
def stranger(tmp_path: Path) -> Iterator[Stranger]:
    port = _free_port()
    log_path = tmp_path / "stranger.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 20
        while not _accepts(port):
            assert time.monotonic() < deadline, "the other server never listened"
            time.sleep(0.05)
        yield Stranger(process, port, log_path)
    finally:
        process.terminate()
        process.wait(10)


@needs_root
async def test_a_forward_to_a_port_another_process_listens_on_is_refused(
    db: Database, bus: NatsBus, tmp_path: Path, stranger: Stranger
) -> None:
    """Another tenant's server, on the task's port before the task binds it, gets none of
    the task's forwards; the refusal says why without naming it."""
    port = stranger.port
    lines_before = stranger.log_lines()  # (the readiness probes' lines, if any)
    async with running_node(db, bus, tmp_path) as node:
        attempt_id, job_id = await node.run_task("exec sleep 600", ports={"http": [port]})
        forward = {"kind": "forward", "attempt_id": attempt_id, "job_id": job_id}
        session = await open_session(
            node.nc, **forward, task_role="worker", task_index=0, port=port, port_label="http"
        )
        assert (session.answer.ok, session.answer.reason) == (False, "refused")
        error = session.answer.error or ""
        assert f"port {port} is held by a process that is not the task's" in error
        assert str(stranger.process.pid) not in error
        assert "http.server" not in error
    stranger.process.terminate()
    stranger.process.wait(10)
    assert stranger.log_lines() == lines_before  # no request reached it


@needs_root
async def test_a_forward_to_a_port_nothing_listens_on_is_refused(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    port = _free_port()
    async with running_node(db, bus, tmp_path) as node:
        attempt_id, job_id = await node.run_task("exec sleep 600", ports={"http": [port]})
        forward = {"kind": "forward", "attempt_id": attempt_id, "job_id": job_id}
        session = await open_session(node.nc, **forward, task_role="worker", task_index=0, port=port)
        # Not the caller's fault: the API says it as a bad gateway (502), not a refusal.
        assert (session.answer.ok, session.answer.reason) == (False, "failed")
        assert f"nothing accepts connections on port {port}" in (session.answer.error or "")
