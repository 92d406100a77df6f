"""The e2e fixture: a stack of real processes on this test's own database and NATS."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.stack import Stack


@pytest.fixture
async def stack(database_url: str, nats_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    running = Stack(tmp_path / "home", {"CORRAL_DATABASE_URL": database_url, "CORRAL_NATS_URL": nats_url})
    running.start()
    try:
        await running.wait_ready()
        yield running
    finally:
        code = running.stop()
        assert code == 0, f"supervisor exited {code}:\n{running.logs('supervisor')}"
