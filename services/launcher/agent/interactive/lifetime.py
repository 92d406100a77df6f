"""How long a session lives when no frame says it ends: shared by exec and forward."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from shared.interactive.stream import StreamEnd


async def watch_stream(stream: StreamEnd, idle_timeout_s: float, end: Callable[[str], None]) -> None:
    """Call ``end`` with the reason once the stream closed (the client left, or went
    silent: a write to the command may be waiting and would not notice) or carried no
    data either way for ``idle_timeout_s``."""
    tick = min(1.0, idle_timeout_s / 4)
    while True:
        await asyncio.sleep(tick)
        if stream.closed:
            end(stream.close_reason or "the client closed the stream")
            return
        if time.monotonic() - stream.last_data > idle_timeout_s:
            end(f"no data either way for {idle_timeout_s:g} s")
            return
