"""The live cycle's minimum gap, on real Postgres: events that arrive within
``min_gap_s`` of the last cycle share the next one; an event on an idle scheduler is
acted on at once."""

from __future__ import annotations

import asyncio
import time

import pytest

from services.scheduler.cycle import Cycle
from services.scheduler.leader import Leadership

GAP_S = 1.0


async def _until_cycles(cycle: Cycle, count: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while cycle.cycles < count:
        assert time.monotonic() < deadline, f"{cycle.cycles} cycles, expected {count}"
        await asyncio.sleep(0.01)


@pytest.mark.slow
async def test_a_cycle_woken_within_the_gap_waits_it_out_and_one_woken_after_it_does_not(
    database_url: str,
) -> None:
    leadership = Leadership(database_url, retry_s=0.05)
    campaign = asyncio.create_task(leadership.run())
    running = None
    try:
        await asyncio.wait_for(leadership.acquired.wait(), 10)
        cycle = Cycle(leadership, interval_s=60, min_gap_s=GAP_S)
        running = asyncio.create_task(cycle.run())
        await _until_cycles(cycle, 1)  # the first, at once

        woken = time.monotonic()
        for _ in range(3):  # three events at once, and within the gap
            cycle.wake()
        await asyncio.sleep(GAP_S / 2)
        assert cycle.cycles == 1  # waiting out the gap
        await _until_cycles(cycle, 2)
        assert time.monotonic() - woken >= GAP_S * 0.9
        await asyncio.sleep(GAP_S * 1.5)
        assert cycle.cycles == 2  # the three shared one cycle

        woken = time.monotonic()  # long after the last cycle: no wait
        cycle.wake()
        await _until_cycles(cycle, 3)
        assert time.monotonic() - woken < GAP_S
    finally:
        for task in (running, campaign):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in (running, campaign) if t is not None), return_exceptions=True)
