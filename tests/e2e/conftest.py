"""The e2e fixture: a stack of real processes on this test's own database and NATS."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.stack import Stack


@pytest.fixture
async def stack(database_url: str, nats_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    env = {"CORRAL_DATABASE_URL": database_url, "CORRAL_NATS_URL": nats_url}
    async with Stack(tmp_path / "home", env).running() as running:
        yield running
