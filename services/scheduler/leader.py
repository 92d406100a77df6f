"""Leader election with a Postgres session advisory lock.

The leader holds ``pg_try_advisory_lock`` on its own dedicated connection and runs each
cycle's transaction *on that connection*. That is the fence: if the connection drops,
the lock is released and the old leader's next transaction fails with it, so two
schedulers can never both commit decisions. Standbys retry every ``retry_s``.

The leader connection is shared by the liveness check and the cycle; asyncpg allows one
operation at a time per connection, so both take ``lock`` first (an overlapping
``SELECT 1`` would otherwise corrupt the cycle's transaction state).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import asyncpg

from shared.aio import raise_if_cancelling
from shared.db.pool import DATABASE_ERRORS, Connection, init_connection, password_from

log = logging.getLogger(__name__)

LEADER_LOCK = 0x0C0A_5C4D  # "the scheduler leader" among Corral's advisory locks


class Leadership:
    def __init__(self, database_url: str, retry_s: float, *, password_file: Path | None = None) -> None:
        self._url = database_url
        self._password = password_from(password_file)
        self._retry_s = retry_s
        self.conn: Connection | None = None
        self.acquired = asyncio.Event()
        self.lock = asyncio.Lock()

    @property
    def is_leader(self) -> bool:
        return self.conn is not None and not self.conn.is_closed()

    async def run(self) -> None:
        """Campaign forever; keep the connection healthy while leading."""
        try:
            while True:
                if not self.is_leader:
                    await self._campaign()
                else:
                    await self._check_alive()
                await asyncio.sleep(self._retry_s)
        finally:
            await self._resign()

    async def _campaign(self) -> None:
        self.acquired.clear()
        try:
            conn: Connection = await asyncpg.connect(self._url, password=self._password, timeout=10)
        except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
            raise_if_cancelling()
            log.warning("leader election: cannot connect (%s)", exc)
            return
        try:
            won = await conn.fetchval("SELECT pg_try_advisory_lock($1)", LEADER_LOCK, timeout=10)
            if won:
                await init_connection(conn)
        except DATABASE_ERRORS as exc:  # (TimeoutError is an OSError)
            raise_if_cancelling()
            log.warning("leader election failed (%s); will try again", exc)
            conn.terminate()  # closing the session also releases a lock it may hold
            return
        if won:
            self.conn = conn
            self.acquired.set()
            log.info("became the active scheduler")
        else:
            await conn.close()

    async def _check_alive(self) -> None:
        async with self.lock:
            if self.conn is None:
                return
            try:
                # Bounded: a half-open TCP connection must not hold leadership (and the
                # cycle, waiting on this lock) hostage until TCP keepalive notices.
                await self.conn.fetchval("SELECT 1", timeout=5)
            except DATABASE_ERRORS:  # (TimeoutError is an OSError)
                raise_if_cancelling()
                log.warning("lost the leader connection; standing down")
                await self._resign()

    async def resign(self) -> None:
        """Give up leadership (the caller holds ``lock``); a fresh campaign follows."""
        await self._resign()

    async def _resign(self) -> None:
        conn, self.conn = self.conn, None
        self.acquired.clear()
        if conn is not None and not conn.is_closed():
            conn.terminate()
