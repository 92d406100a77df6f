"""Migrations apply in order, once, and produce the committed schema."""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
import pytest

from shared.db.migrations import apply_migrations, migration_files
from shared.db.pool import Database, connect
from shared.db.queries import Queries
from shared.outbox.writing import change_with_event_statement
from shared.settings import DatabaseSettings
from tests.infra import PostgresServer, unique_name
from tests.schema_snapshot import SNAPSHOT, migrated_schema

ROOT = Path(__file__).resolve().parents[2]


async def test_applying_every_migration_yields_the_committed_schema(pg: PostgresServer) -> None:
    assert await migrated_schema(pg.base_url) == SNAPSHOT.read_text(), (
        "the migrations no longer produce shared/db/schema.sql; if the change is intended, "
        "run `make schema` and commit the result"
    )


async def test_migrations_apply_once(pg: PostgresServer) -> None:
    name = unique_name("mig")
    admin = await asyncpg.connect(pg.url("postgres"))
    await admin.execute(f"CREATE DATABASE {name}")
    try:
        db = await connect(DatabaseSettings(url=pg.url(name)))
        first = await apply_migrations(db)
        second = await apply_migrations(db)
        await db.close()
        assert first == [m.version for m in migration_files()]
        assert second == []
    finally:
        await admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        await admin.close()


async def test_an_edited_migration_is_refused(db: Database, tmp_path: Path) -> None:
    for migration in migration_files():
        (tmp_path / f"{migration.version:04d}_{migration.name}.sql").write_text(
            migration.sql + "\n-- edited\n"
        )
    with pytest.raises(RuntimeError, match="was edited after it was applied"):
        await apply_migrations(db, tmp_path)


def test_migration_files_must_be_numbered(tmp_path: Path) -> None:
    (tmp_path / "add_things.sql").write_text("SELECT 1;")
    with pytest.raises(ValueError, match=r"NNNN_description\.sql"):
        migration_files(tmp_path)


SQL_DIRS = sorted(path.parent for path in ROOT.glob("services/**/sql/*.sql"))


@pytest.mark.parametrize("directory", sorted(set(SQL_DIRS)), ids=lambda p: str(p.relative_to(ROOT)))
async def test_every_named_query_is_valid_sql_for_the_schema(db: Database, directory: Path) -> None:
    queries = Queries(directory)
    assert queries.names()
    async with db.connection() as conn:
        for name in queries.names():
            sql = getattr(queries, name)
            if follows := re.search(r"^-- consequence of: (\w+)$", sql, re.MULTILINE):
                # A Consequence reads its change's CTE: prepare the statement that runs it.
                change = getattr(queries, follows[1])
                sql = change_with_event_statement(change, sql, _params(change))
            # Preparing parses and plans the statement against the real schema.
            await conn.prepare(sql)


def _params(sql: str) -> int:
    return max((int(n) for n in re.findall(r"\$(\d+)", sql)), default=0)


def test_a_query_defined_twice_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.sql").write_text("-- name: q\nSELECT 1;\n-- name: q\nSELECT 2;\n")
    with pytest.raises(ValueError, match="defined twice"):
        Queries(tmp_path)
