"""The API served in-process over ASGI, on a real database (``client``, as the admin).
The API on a real port (``api``) is shared with the CLI and SDK tests: ``tests/fixtures/api.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from services.api.app import create_app
from services.api.settings import ApiSettings, Settings
from shared.db.pool import Database
from shared.service import Health


@pytest.fixture
async def client(db: Database, admin_token: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(api=ApiSettings(max_body_bytes=64 * 1024))
    app = create_app(db, Health("api", {"postgres": db.ping}), settings)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport,
        base_url="http://corral.test",
        headers={"Authorization": f"Bearer {admin_token}"},
    ) as http:
        yield http
