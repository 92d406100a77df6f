"""Whose socket listens on a port: the check that a forward reaches the task it names.

Tasks share the host's network (a sandbox has no network namespace), so the port
number alone proves nothing: any process on the node may bind a port allocated to
another task, before that task does or after its server exits, and would then receive
the connections forwarded (and proxied) to that task. Before connecting, the agent
finds the sockets listening on the port at an address a connection to
``127.0.0.1:<port>`` could reach, from the kernel's tables (``/proc/net/tcp`` and
``/proc/net/tcp6``), and checks that every one of them is held open by a process of
the task (a descriptor ``socket:[<inode>]`` under ``/proc/<pid>/fd``).

A socket's inode number is its identity: it comes from a counter that takes 2**32
sockets to wrap, so no other socket takes it meanwhile, and ``listening_sockets`` read
again after connecting tells whether the listener the connection reached is still one
that was checked.

Everything here reads ``/proc`` and blocks; the server calls it in a worker thread.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

LISTEN = "0A"  # the kernel's TCP_LISTEN, as /proc/net/tcp writes states
# Addresses a listener reached by a connection to 127.0.0.1 may be bound to; the IPv6
# ones cover dual-stack sockets (whether a socket is IPv6-only is not in the tables, so
# the check takes the stricter view and counts them all).
LOOPBACK_REACHABLE = frozenset({"127.0.0.1", "0.0.0.0", "::1", "::", "::ffff:127.0.0.1", "::ffff:0.0.0.0"})
TABLES = (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6))

Owner = Literal["nobody", "task", "other"]


@dataclass(frozen=True)
class Listener:
    """One listening socket, as the kernel's table says it."""

    address: str
    port: int
    inode: int


def parse_table_line(line: str, family: socket.AddressFamily) -> Listener | None:
    """The listener a line of ``/proc/net/tcp`` (``AF_INET``) or ``tcp6`` (``AF_INET6``)
    describes; None for the heading, a socket in another state, or a line it cannot read.

    Addresses are written as the hex of 32-bit words in the machine's byte order
    (``0100007F:1F90`` is 127.0.0.1:8080 on a little-endian machine)."""
    fields = line.split()
    if len(fields) < 10 or fields[3] != LISTEN:
        return None
    address_hex, _, port_hex = fields[1].partition(":")
    try:
        words = [int(address_hex[i : i + 8], 16) for i in range(0, len(address_hex), 8)]
        packed = struct.pack(f"={len(words)}I", *words)
        return Listener(socket.inet_ntop(family, packed), int(port_hex, 16), int(fields[9]))
    except (ValueError, struct.error, OSError):
        return None


def listening_sockets(port: int, proc: Path = Path("/proc")) -> set[int]:
    """The inodes of the sockets listening on ``port`` at an address a connection to
    ``127.0.0.1:<port>`` could reach."""
    inodes: set[int] = set()
    for table, family in TABLES:
        try:
            lines = (proc / "net" / table).read_text().splitlines()
        except FileNotFoundError:  # (a kernel without IPv6)
            continue
        for line in lines[1:]:
            listener = parse_table_line(line, family)
            if listener is not None and listener.port == port and listener.address in LOOPBACK_REACHABLE:
                inodes.add(listener.inode)
    return inodes


def sockets_held_by(pids: Iterable[int], wanted: set[int], proc: Path = Path("/proc")) -> set[int]:
    """Which of the sockets ``wanted`` (inodes) the processes ``pids`` hold descriptors
    of; it stops looking once it found them all (a process that exits meanwhile holds
    none)."""
    found: set[int] = set()
    for pid in pids:
        fd_dir = proc / str(pid) / "fd"
        with contextlib.suppress(OSError):
            for name in os.listdir(fd_dir):
                with contextlib.suppress(OSError, ValueError):
                    target = os.readlink(fd_dir / name)
                    if target.startswith("socket:[") and int(target[8:-1]) in wanted:
                        found.add(int(target[8:-1]))
        if found == wanted:
            break
    return found


def owner_of_port(port: int, pids: Iterable[int], proc: Path = Path("/proc")) -> tuple[Owner, set[int]]:
    """Who listens on ``port``: ``nobody``, only processes among ``pids`` (``task``), or
    some process outside them (``other``); with the listening sockets' inodes."""
    listening = listening_sockets(port, proc)
    if not listening:
        return "nobody", listening
    if sockets_held_by(pids, listening, proc) == listening:
        return "task", listening
    return "other", listening
