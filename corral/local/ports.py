"""Loopback ports and output files for the private servers we start (stack, tests, benchmarks)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


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
