"""Fixtures for the whole suite: real Postgres, real NATS, and leak checks.

Fixtures that more than one test directory uses live in ``tests/fixtures/`` and are
registered here as plugins, so a test asks for them by name and no conftest imports
another's. Every test that boots a whole stack is marked ``e2e`` here, by where it lives
or by the fixture it asks for, so that ``pytest -m "not e2e"`` stays a quick loop without
each such test having to remember its marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from shared.bus.nats import NatsBus
from shared.db.migrations import apply_migrations
from shared.db.pool import Database, connect
from shared.settings import DatabaseSettings, NatsSettings
from tests.infra import PostgresServer, nats_server, postgres_server, unique_name

pytest_plugins = [
    "tests.fixtures.api",
    "tests.fixtures.otlp_collector",
    "tests.fixtures.receivers",
    "tests.fixtures.stack",
]

TEMPLATE = "corral_template"

E2E_DIRECTORY = Path(__file__).parent / "e2e"
# Fixtures that start the whole stack as real processes: a test asking for one is e2e
# wherever it lives (the CLI's ``submit --wait``, for one).
STACK_FIXTURES = frozenset({"stack", "runtime_stack"})


# tryfirst: before pytest's own ``-m`` selection reads the markers.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        uses_stack = not STACK_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
        if uses_stack or item.path.is_relative_to(E2E_DIRECTORY):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def pg() -> Iterator[PostgresServer]:
    with postgres_server() as server:

        async def make_template() -> None:
            admin = await asyncpg.connect(server.url("postgres"))
            await admin.execute(f"CREATE DATABASE {TEMPLATE}")
            await admin.close()
            db = await connect(DatabaseSettings(url=server.url(TEMPLATE)))
            await apply_migrations(db)
            await db.close()

        asyncio.run(make_template())
        yield server


@contextlib.asynccontextmanager
async def fresh_database(pg: PostgresServer, prefix: str) -> AsyncIterator[str]:
    """A migrated database of its own (a copy of the template), dropped afterwards."""
    name = unique_name(prefix)
    admin = await asyncpg.connect(pg.url("postgres"))
    try:
        await admin.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        yield pg.url(name)
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await admin.close()


@pytest.fixture
async def database_url(pg: PostgresServer) -> AsyncIterator[str]:
    """A fresh, migrated database for this test alone."""
    async with fresh_database(pg, "t") as url:
        yield url


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = await connect(DatabaseSettings(url=database_url, pool_max_size=10))
    yield database
    await database.close()


@pytest.fixture
def nats_url() -> Iterator[str]:
    """A NATS server with JetStream for this test alone."""
    with nats_server() as url:
        yield url


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[NatsBus]:
    connected = await NatsBus.connect(NatsSettings(url=nats_url))
    await connected.ensure_streams()
    yield connected
    await connected.close()


@pytest.fixture(autouse=True)
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks running behind it."""
    before = asyncio.all_tasks()
    yield
    await asyncio.sleep(0)
    leaked = [t for t in asyncio.all_tasks() - before if t is not asyncio.current_task() and not t.done()]
    assert not leaked, f"test leaked asyncio tasks: {leaked}"


@pytest.fixture
def restored_gc() -> Iterator[None]:
    """For tests that set up the process's garbage collector as the scheduler does
    (shared/gc_tuning.py): its thresholds and frozen objects are put back after."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
