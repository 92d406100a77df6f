"""Fixtures of the shared library's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shared.bus.memory import MemoryBus
from shared.bus.nats import NatsBus
from shared.bus.protocol import Bus
from shared.settings import NatsSettings


@pytest.fixture(params=["nats", "memory"])
async def any_bus(request: pytest.FixtureRequest) -> AsyncIterator[Bus]:
    """A bus with the streams ensured: real NATS, then the in-memory one (a test taking it
    runs against both, so the two keep the same semantics)."""
    bus: Bus
    if request.param == "memory":
        bus = MemoryBus()
    else:
        bus = await NatsBus.connect(NatsSettings(url=request.getfixturevalue("nats_url")))
    await bus.ensure_streams()
    yield bus
    await bus.close()
