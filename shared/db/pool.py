"""The connection pool and the transaction helper every repository uses.

``Database`` wraps an ``asyncpg.Pool``. A connection going back to the pool has any
transaction it left open rolled back, and nothing more (``keep_session``). JSON and
JSONB columns are decoded to Python values by a codec set on every new connection, so
repositories never call ``json.loads`` themselves.

``after_commit`` lets code inside a transaction ask for something to happen once that
transaction has committed, and only then (the outbox publishes its events that way).
``Database.transaction`` gives every transaction that scope; a transaction begun on a
connection by hand gets it from ``commit_scope``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from shared.db.credentials import read_secret_file
from shared.errors import TransientError
from shared.settings import DatabaseSettings

log = logging.getLogger(__name__)

# What asyncpg raises when Postgres (or the way to it) is away: down, restarting, in
# crash recovery, or its connection cut.
DATABASE_AWAY: tuple[type[Exception], ...] = (
    OSError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    # Another backend PANICked (a WAL write on a full disk, say): the postmaster ends every
    # session with this, then recovers.
    asyncpg.CrashShutdownError,
    # A connection whose server went away mid-query can come back from the pool still
    # "busy" ("another operation is in progress"): the same outage, seen later.
    asyncpg.exceptions.InternalClientError,
)

# Postgres up but refusing for want of something outside the request (SQLSTATE class 53:
# its disk full, out of memory, out of connection slots): the statement was rolled back
# and the same one succeeds once an operator frees the resource.
DATABASE_OUT_OF_RESOURCES: tuple[type[Exception], ...] = (asyncpg.InsufficientResourcesError,)

# Either: callers treat these as "retry later", never as a bad message or a 500.
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (*DATABASE_AWAY, *DATABASE_OUT_OF_RESOURCES)

# What a background loop (relay, reconcile, lease, delivery) survives by waiting and
# trying again: the above, and any error Postgres itself reports — a loop must outlive
# a Postgres restart; only a bug in the loop itself may end the service.
DATABASE_ERRORS: tuple[type[Exception], ...] = (*DATABASE_UNAVAILABLE, asyncpg.PostgresError)

# A pooled connection or a dedicated one (the scheduler leader's): the same API.
# (asyncpg's classes are generic only in its stubs, hence the TYPE_CHECKING split.)
if TYPE_CHECKING:
    Connection: TypeAlias = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]
    RecordPool: TypeAlias = asyncpg.Pool[asyncpg.Record]
    PooledConnection: TypeAlias = PoolConnectionProxy[asyncpg.Record]
else:
    Connection = asyncpg.Connection | PoolConnectionProxy
    RecordPool = asyncpg.Pool
    PooledConnection = PoolConnectionProxy


# The transaction now open in this task (its connection) and what is to run once it
# commits. A ContextVar, so a transaction in another task, or on another connection in
# this one, never runs or drops this one's callbacks.
_AFTER_COMMIT: ContextVar[tuple[object, list[Callable[[], None]]] | None] = ContextVar(
    "corral_after_commit", default=None
)


@contextmanager
def commit_scope(conn: Connection) -> Iterator[None]:
    """Around a transaction on ``conn`` (outside its ``async with conn.transaction()``):
    the callbacks ``after_commit`` registered inside run once the block exits cleanly,
    i.e. after the commit; an exception (a rollback, a failed commit) drops them."""
    callbacks: list[Callable[[], None]] = []
    token = _AFTER_COMMIT.set((conn, callbacks))
    try:
        yield
    finally:
        _AFTER_COMMIT.reset(token)
    for callback in callbacks:
        callback()


def has_commit_scope(conn: Connection) -> bool:
    """Whether the transaction open on ``conn`` has a ``commit_scope`` for ``after_commit``."""
    scope = _AFTER_COMMIT.get()
    return scope is not None and scope[0] is conn


def after_commit(conn: Connection, callback: Callable[[], None]) -> bool:
    """Run ``callback`` once the transaction open on ``conn`` has committed; False (and
    nothing registered) when that transaction has no ``commit_scope`` (``conn`` is the
    object the scope was opened with, as ``Database.transaction`` yields it). Callbacks run in
    the order registered, synchronously, and must not raise."""
    scope = _AFTER_COMMIT.get()
    if scope is None or scope[0] is not conn:
        return False
    scope[1].append(callback)
    return True


async def init_connection(conn: Connection) -> None:
    for name in ("json", "jsonb"):
        await conn.set_type_codec(
            name, schema="pg_catalog", encoder=json.dumps, decoder=json.loads, format="text"
        )


async def keep_session(conn: Connection) -> None:
    """What a connection goes back to the pool with: its session as it is.

    asyncpg's default reset sends ``SELECT pg_advisory_unlock_all(); CLOSE ALL;
    UNLISTEN *; RESET ALL`` on every release: one more round trip to Postgres, and four
    statements for it to run, per checkout (about 34 per job end to end, a tenth of all
    the statements Corral sends). Corral's pooled connections keep no session state to
    undo: nothing ``SET``s a session variable (``SET LOCAL`` ends with its transaction),
    session advisory locks are taken only on the scheduler leader's own connection and,
    for one pass, by the outbox relay, which gives its lock back before the connection
    goes back or else closes the connection, cursors live inside transactions, and the
    ``LISTEN``s (the outbox relay's, the launcher's for ended attempts) ``UNLISTEN``
    before their connection goes back.
    asyncpg still rolls back a transaction left open (``Connection._reset``, called
    before this)."""


class Database:
    """A pool plus the conveniences repositories need; built once per process."""

    def __init__(self, pool: RecordPool) -> None:
        self.pool = pool

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """A connection inside a transaction, committed on clean exit; what ``after_commit``
        registered inside runs after the commit."""
        async with self.pool.acquire() as conn:
            with commit_scope(conn):
                async with conn.transaction():
                    yield conn

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        async with self.pool.acquire() as conn:
            yield conn

    async def ping(self) -> bool:
        try:
            async with self.pool.acquire(timeout=2) as conn:
                return bool(await conn.fetchval("SELECT 1"))
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return False

    async def close(self, timeout_s: float = 5.0) -> None:
        """Close gracefully; a connection still held after ``timeout_s`` is cut.

        A task cancelled in the middle of a query can leave its connection to be
        released late (or never, if it died oddly); shutdown must not wait on it.
        """
        try:
            await asyncio.wait_for(self.pool.close(), timeout_s)
        except TimeoutError:
            log.warning("connections still in use after %.0fs; terminating the pool", timeout_s)
            self.pool.terminate()

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self.pool.acquire() as conn:
            return list(await conn.fetch(query, *args))

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        async with self.pool.acquire() as conn:
            return await conn.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        async with self.pool.acquire() as conn:
            return await conn.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> str:
        async with self.pool.acquire() as conn:
            return await conn.execute(query, *args)

    async def delete_in_batches(self, query: str, *args: Any, batch: int) -> int:
        """Run ``query``, a DELETE of at most ``batch`` rows (its last parameter), until it
        deletes fewer; how many rows went in all. A statement per batch: a retention sweep
        holds no long lock and no long transaction."""
        total = 0
        while True:
            status = await self.execute(query, *args, batch)
            deleted = int(status.split()[-1])
            total += deleted
            if deleted < batch:
                return total


async def connect(settings: DatabaseSettings, *, attempts: int = 30) -> Database:
    """Open the pool, waiting (up to ``attempts`` seconds) for Postgres to come up.

    Services start in any order under the supervisor, and Postgres may be restarting;
    waiting here instead of crashing keeps start-up quiet.
    """
    last: Exception | None = None
    password = password_from(settings.password_file)
    tries = 0
    refused_delay = 1.0
    while tries < attempts:
        try:
            pool = await asyncpg.create_pool(
                settings.url,
                password=password,
                min_size=settings.pool_min_size,
                max_size=settings.pool_max_size,
                init=init_connection,
                reset=keep_session,
            )
        except REFUSED_LOGIN as exc:
            # Wrong, expired or revoked credentials: no crash loop, a line that says so,
            # and another try (the password file is read again), backing off to 30 s.
            log.error(
                "Postgres refused the login at %s: %s; check CORRAL_DATABASE_PASSWORD_FILE (%s); "
                "trying again in %.0f s",
                _redact(settings.url),
                exc,
                settings.password_file,
                refused_delay,
            )
            await asyncio.sleep(refused_delay)
            refused_delay = min(30.0, refused_delay * 2)
            continue
        except DATABASE_ERRORS as exc:
            last = exc
            tries += 1
            await asyncio.sleep(1.0)
            continue
        return Database(pool)
    raise TransientError(f"cannot reach Postgres at {_redact(settings.url)}: {last}") from last


# A server that answers but will not let us in (the login's password is wrong or its
# role may not log in).
REFUSED_LOGIN = (asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError)


def password_from(password_file: Path | None) -> Callable[[], str] | None:
    """asyncpg's ``password`` for a connection's settings: the file, read at each new
    connection (a rotated password is picked up); None when the URL says it all. A
    missing or open file is said at once."""
    if password_file is None:
        return None
    read_secret_file(password_file)
    return partial(read_secret_file, password_file)


def _redact(url: str) -> str:
    """Hide the password in a connection URL before it reaches a log line."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"
