"""The committed schema: what applying every migration must produce.

``python -m tests.schema_snapshot`` rewrites ``shared/db/schema.sql`` from a fresh
database (``make schema`` runs it); the migration test compares against that file, so a
migration that does not do what its author thought shows up as a diff in review.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import asyncpg

from corral.local.pg_install import find_pg_bin
from shared.db.migrations import apply_migrations
from shared.db.pool import connect
from shared.settings import DatabaseSettings
from tests.infra import postgres_server, unique_name

SNAPSHOT = Path(__file__).resolve().parent.parent / "shared" / "db" / "schema.sql"


def dump_schema(url: str) -> str:
    """pg_dump's schema-only output, minus version- and session-specific noise."""
    output = subprocess.run(
        [find_pg_bin("pg_dump"), "--schema-only", "--no-owner", "--no-privileges", url],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    kept = []
    for line in output.splitlines():
        if not line.strip() or line.startswith(("--", "SET ", "SELECT pg_catalog.set_config", "\\")):
            continue
        kept.append(line.rstrip())
    return "\n".join(kept) + "\n"


async def migrated_schema(base_url: str) -> str:
    name = unique_name("schema")
    admin = await asyncpg.connect(base_url + "postgres")
    await admin.execute(f"CREATE DATABASE {name}")
    try:
        db = await connect(DatabaseSettings(url=base_url + name))
        await apply_migrations(db)
        await db.close()
        return await asyncio.to_thread(dump_schema, base_url + name)
    finally:
        await admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        await admin.close()


def main() -> int:
    with postgres_server() as server:
        SNAPSHOT.write_text(asyncio.run(migrated_schema(server.base_url)))
    print(f"wrote {SNAPSHOT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
