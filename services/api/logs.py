"""Following a task's log while it runs (``GET .../logs?follow=true``).

The node agent appends the task's output to one file per attempt. Following means:
send what is there, then poll for more, and stop once the attempt has ended *and* the
file has been read to its end — checking the end state before the last read, so the
last lines a task writes just before exiting are never lost. Polling (not inotify)
keeps it working on any filesystem, including a shared one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from services.api.repository import ApiRepository

CHUNK_BYTES = 64 * 1024
POLL_S = 0.2
LIVE_STATES = ("ASSIGNED", "STARTING", "RUNNING")


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(CHUNK_BYTES)
    except FileNotFoundError:
        return b""


async def follow_log(repo: ApiRepository, attempt_id: str, path: Path) -> AsyncIterator[bytes]:
    offset = 0
    while True:
        ended = await repo.attempt_state(attempt_id) not in LIVE_STATES
        chunk = await asyncio.to_thread(_read_from, path, offset)
        while chunk:
            offset += len(chunk)
            yield chunk
            chunk = await asyncio.to_thread(_read_from, path, offset)
        if ended:
            return
        await asyncio.sleep(POLL_S)
