"""The e2e fixture: a stack of real processes on this test's own database and NATS."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral.local.ports import free_port
from tests.e2e.stack import Stack


@pytest.fixture
async def stack(database_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    # The stack's own NATS, as `make up` runs it: every service on its own identity, so
    # every e2e test also shows that each has the permissions it needs.
    env = {"CORRAL_DATABASE_URL": database_url, "CORRAL_NATS_PORT": str(free_port())}
    async with Stack(tmp_path / "home", env).running() as running:
        yield running
