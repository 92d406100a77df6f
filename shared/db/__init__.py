"""Postgres access over asyncpg: the pool, ordered plain-SQL migrations, named queries."""

from shared.db.migrations import apply_migrations, migration_files
from shared.db.pool import Database, connect
from shared.db.queries import Queries

__all__ = ["Database", "Queries", "apply_migrations", "connect", "migration_files"]
