"""The launcher starts once every worker's sshd answers.

``mpirun`` gives up on a worker it cannot reach at once, and workers start on their own
nodes in no fixed order: so the launcher's start waits (on the agent's event loop, never
blocking it) until each worker's port sends an SSH banner (``SSH-2.0-...``) — a port
that merely accepts could be anything. It stops waiting when its task is asked to stop,
and fails with the worker it waited for when the time is up.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

BANNER = b"SSH-2.0-"
IDENTIFICATION = b"SSH-2.0-corral-barrier\r\n"
RETRY_INTERVAL_S = 0.15
_CONNECT_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class SshTarget:
    name: str  # worker-<index>
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name} ({self.host}:{self.port})"


class BarrierTimeout(Exception):
    """A worker's sshd did not answer in time; the message names it."""


async def answers(target: SshTarget, timeout_s: float = _CONNECT_TIMEOUT_S) -> bool:
    """Whether ``target`` accepts a connection and sends an SSH banner line."""
    writer = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(target.host, target.port)
            line = await reader.readline()
            if not line.startswith(BANNER):
                return False
            # Said back before closing, so sshd sees a client that left, not a broken
            # exchange (which it logs at ERROR, in the worker's log, every probe).
            writer.write(IDENTIFICATION)
            await writer.drain()
        return True
    except (OSError, TimeoutError, ValueError):
        return False
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def wait_for_sshds(
    targets: list[SshTarget],
    timeout_s: float,
    should_stop: Callable[[], bool],
    interval_s: float = RETRY_INTERVAL_S,
) -> bool:
    """Wait until every target answers: True; False when ``should_stop()`` said so
    first. ``BarrierTimeout`` names the first that had not answered after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    waiting = list(targets)
    while waiting:
        if should_stop():
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            raise BarrierTimeout(
                f"ssh barrier: {waiting[0]} did not answer within {timeout_s:g} s; check that worker's log"
            )
        results = await asyncio.gather(*(answers(t, min(_CONNECT_TIMEOUT_S, left)) for t in waiting))
        waiting = [t for t, ok in zip(waiting, results, strict=True) if not ok]
        if waiting:
            await asyncio.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))
    return True
