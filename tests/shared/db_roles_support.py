"""What the least-privilege tests share: logging in to Postgres as a role, with a
password from a file, as the services do; a message a consumer gave up on."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from shared.db.credentials import write_secret_file
from shared.db.pool import Database, connect
from shared.settings import DatabaseSettings
from tests.infra import unique_name


def url_as(url: str, user: str) -> str:
    """``url`` with ``user`` and no password (it comes from a file)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}"))


@asynccontextmanager
async def login_as(db: Database, url: str, role: str, tmp_path: Path) -> AsyncIterator[Database]:
    """A pool logged in, with a password from a 0600 file, as a login role of this test's
    own that is a member of ``role`` (roles are the cluster's, shared with every test:
    their own logins are left alone)."""
    user = unique_name("login")
    password = secrets.token_urlsafe(24)
    password_file = tmp_path / "credentials" / user
    write_secret_file(password_file, password)
    await db.execute(f"CREATE ROLE {user} LOGIN PASSWORD '{password}' IN ROLE {role}")
    try:
        logged_in = await connect(
            DatabaseSettings(url=url_as(url, user), password_file=password_file, pool_max_size=4), attempts=1
        )
        try:
            assert await logged_in.fetchval("SELECT current_user") == user
            yield logged_in
        finally:
            await logged_in.close()
    finally:
        await db.execute(f"DROP ROLE {user}")


@dataclass(frozen=True)
class GivenUpDelivery:
    """A message a consumer gave up on, as ``run_consumer`` hands it to the dead letters."""

    subject: str
    data: bytes = b"?"
    headers: dict[str, str] = field(default_factory=dict)
    num_delivered: int = 1
    stream_seq: int | None = 3

    async def ack(self) -> None:
        return None

    async def nak(self, delay_s: float) -> None:  # noqa: ARG002
        return None

    async def term(self) -> None:
        return None
