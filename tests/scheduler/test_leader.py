"""Leader election and the cycle share one connection without tripping over each other."""

from __future__ import annotations

import asyncio

from services.scheduler.cycle import Cycle
from services.scheduler.leader import Leadership


async def test_liveness_checks_never_corrupt_the_cycles_transactions(database_url: str) -> None:
    # A liveness check every millisecond against back-to-back cycles: before the lock,
    # an overlapping SELECT 1 broke the cycle's transaction state for good.
    leadership = Leadership(database_url, retry_s=0.001)
    cycle = Cycle(leadership, interval_s=60)
    campaign = asyncio.create_task(leadership.run())
    try:
        await asyncio.wait_for(leadership.acquired.wait(), 10)
        for _ in range(200):
            await cycle.run_once()
        assert cycle.cycles == 200
        assert leadership.is_leader
    finally:
        campaign.cancel()
        await asyncio.gather(campaign, return_exceptions=True)


async def test_only_one_of_two_schedulers_leads_and_the_standby_takes_over(database_url: str) -> None:
    first, second = Leadership(database_url, retry_s=0.05), Leadership(database_url, retry_s=0.05)
    one = asyncio.create_task(first.run())
    try:
        await asyncio.wait_for(first.acquired.wait(), 10)
        two = asyncio.create_task(second.run())
        await asyncio.sleep(0.3)
        assert first.is_leader
        assert not second.is_leader
        one.cancel()  # the leader goes away: its session, and so its lock, end
        await asyncio.gather(one, return_exceptions=True)
        await asyncio.wait_for(second.acquired.wait(), 10)
        assert second.is_leader
    finally:
        for task in (one, two):
            task.cancel()
        await asyncio.gather(one, two, return_exceptions=True)


async def test_shutdown_mid_cycle_always_completes(database_url: str) -> None:
    # SIGTERM cancels every root task at once: the leader's connection is closed while a
    # cycle runs a query on it. The cycle must still end, not swallow its cancellation.
    for _ in range(15):
        leadership = Leadership(database_url, retry_s=0.5)
        cycle = Cycle(leadership, interval_s=0.001)
        tasks = [asyncio.create_task(leadership.run()), asyncio.create_task(cycle.run())]
        await asyncio.wait_for(leadership.acquired.wait(), 10)
        await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        _, pending = await asyncio.wait(tasks, timeout=5)
        assert not pending, "a scheduler task ignored its cancellation"
