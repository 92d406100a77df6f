"""The API served in-process over ASGI, on a real database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from services.api.app import create_app
from services.api.auth import bootstrap_admin, load_or_create_admin_token
from services.api.repository import ApiRepository
from services.api.settings import ApiSettings, Settings
from shared.db.pool import Database
from shared.service import Health


@pytest.fixture
async def admin_token(db: Database, tmp_path: Path) -> str:
    path = tmp_path / "admin-token"
    await bootstrap_admin(ApiRepository(db), path)
    return load_or_create_admin_token(path)


@pytest.fixture
async def client(db: Database, admin_token: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(api=ApiSettings(max_body_bytes=64 * 1024))
    app = create_app(ApiRepository(db), Health("api", {"postgres": db.ping}), settings)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport,
        base_url="http://corral.test",
        headers={"Authorization": f"Bearer {admin_token}"},
    ) as http:
        yield http
