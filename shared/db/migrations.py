"""Ordered plain-SQL migrations, applied at service start.

Files in ``shared/db/migrations/`` are named ``NNNN_what.sql`` and applied in order,
each in its own transaction, and recorded in ``corral.schema_migrations``. A
transaction-level advisory lock serialises services starting together, so every service
may call ``apply_migrations`` and exactly one applies each file. A file that was
applied is never edited: change the schema with a new file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from shared.db.pool import Database

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# Arbitrary constant naming "the migration lock" among Corral's advisory locks.
_MIGRATION_LOCK = 0x0C0A_0001


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def migration_files(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    migrations = []
    for path in sorted(directory.glob("*.sql")):
        number, _, name = path.stem.partition("_")
        if not number.isdigit() or not name:
            raise ValueError(f"migration file {path.name} must be named NNNN_description.sql")
        migrations.append(Migration(int(number), name, path.read_text()))
    versions = [m.version for m in migrations]
    if len(set(versions)) != len(versions):
        raise ValueError(f"duplicate migration numbers in {directory}")
    return migrations


async def apply_migrations(db: Database, directory: Path = MIGRATIONS_DIR) -> list[int]:
    """Apply every migration not yet recorded; returns the versions applied now."""
    applied_now: list[int] = []
    async with db.transaction() as conn:
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        await conn.execute("CREATE SCHEMA IF NOT EXISTS corral")
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS corral.schema_migrations (
                   version integer PRIMARY KEY,
                   name text NOT NULL,
                   checksum text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        done = {
            row["version"]: row["checksum"]
            for row in await conn.fetch("SELECT version, checksum FROM corral.schema_migrations")
        }
        for migration in migration_files(directory):
            if migration.version in done:
                if done[migration.version] != migration.checksum:
                    raise RuntimeError(
                        f"migration {migration.version}_{migration.name} was edited after it was "
                        "applied; put schema changes in a new migration file"
                    )
                continue
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO corral.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                migration.version,
                migration.name,
                migration.checksum,
            )
            applied_now.append(migration.version)
    return applied_now
