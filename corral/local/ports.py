"""Loopback ports and output files for the private servers we start (stack, tests, benchmarks)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Collection, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

from corral.local.problems import StartupProblem


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_ports(count: int, exclude: Collection[int] = ()) -> list[int]:
    """``count`` distinct free ports, none of ``exclude`` (ports promised elsewhere but not
    bound yet, such as the API's): all are held open while they are chosen, so two calls
    of ``free_port`` cannot hand the same one to two services."""
    with ExitStack() as stack:
        chosen: list[int] = []
        while len(chosen) < count:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if port not in exclude:  # an excluded one stays held, so it is not offered again
                chosen.append(port)
        return chosen


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def check_port_free(port: int, step: str, setting: str) -> None:
    """Refuse, before a server is started, a port something already listens on."""
    if port_open(port):
        raise StartupProblem(
            step,
            f"port {port} is already in use on 127.0.0.1 (another program, or another `make up`)",
            f"stop what holds it, or choose another port with {setting}",
        )


@contextmanager
def child_output(log_file: Path | None) -> Iterator[IO[bytes] | int]:
    """Where a child server's output goes: appended to ``log_file``, or discarded.

    The parent's handle is closed once the child has inherited it.
    """
    if log_file is None:
        yield subprocess.DEVNULL
        return
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as handle:
        yield handle


def wait_until_listening(
    process: subprocess.Popen[bytes], port: int, timeout_s: float, name: str, host: str = "127.0.0.1"
) -> None:
    """Wait for a server we just started to listen on ``port``; fail fast if it died."""
    deadline = time.monotonic() + timeout_s
    while not port_open(port, host):
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode} at start (see its log)")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not listen on port {port} within {timeout_s:.0f}s")
        time.sleep(0.02)
