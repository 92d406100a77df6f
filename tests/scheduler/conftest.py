"""Fixtures of the scheduler's tests that run the real cycle on real Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from services.scheduler.cycle import Cycle
from services.scheduler.leader import Leadership


@pytest.fixture
async def cycle(database_url: str) -> AsyncIterator[Cycle]:
    """The live cycle (``Cycle.run_once``) on a leader's connection, woken by hand."""
    leadership = Leadership(database_url, retry_s=0.05)
    campaign = asyncio.create_task(leadership.run())
    try:
        await asyncio.wait_for(leadership.acquired.wait(), 10)
        yield Cycle(leadership, interval_s=60)
    finally:
        campaign.cancel()
        await asyncio.gather(campaign, return_exceptions=True)
