"""Every running service instance says, every few seconds, that it is alive.

A row per instance in ``corral.service_instances``: the alerter's ``ServiceDown`` rule
fires when no instance of a service has been heard for a while, and ``GET
/api/v1/service-instances`` lists them. A clean stop deletes its row, so a deliberate shutdown or
scale-down pages nobody; a crashed instance's row stays behind, ageing — which is the
point. Rows silent for a day are pruned whenever an instance starts (a crash is followed
by a restart, so they cannot pile up).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid

from shared.db.pool import DATABASE_ERRORS, Database

log = logging.getLogger(__name__)

BEAT = """
INSERT INTO corral.service_instances (instance_id, service, hostname, pid)
VALUES ($1, $2, $3, $4)
ON CONFLICT (instance_id) DO UPDATE SET last_seen_at = now()
"""
PRUNE = "DELETE FROM corral.service_instances WHERE last_seen_at < now() - interval '1 day'"
GONE = "DELETE FROM corral.service_instances WHERE instance_id = $1"


class Liveness:
    def __init__(self, db: Database, service: str, interval_s: float) -> None:
        self._db = db
        self.service = service
        self.interval_s = interval_s
        self.instance_id = f"{service}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    async def run(self) -> None:
        """Beat until cancelled (the service stops); then say goodbye."""
        pruned = False
        try:
            while True:
                try:
                    await self.beat()
                    if not pruned:
                        await self.prune()
                        pruned = True
                except DATABASE_ERRORS as exc:
                    log.warning("liveness beat failed (%s); again in %.0fs", exc, self.interval_s)
                await asyncio.sleep(self.interval_s)
        finally:
            await self._goodbye()

    # The statements, apart: a node agent, which may not touch the table, runs its own
    # (services/launcher/agent/repository.py).
    async def beat(self) -> None:
        await self._db.execute(BEAT, self.instance_id, self.service, socket.gethostname(), os.getpid())

    async def prune(self) -> None:
        await self._db.execute(PRUNE)

    async def forget(self) -> None:
        await self._db.execute(GONE, self.instance_id)

    async def _goodbye(self) -> None:
        try:
            await asyncio.wait_for(self.forget(), timeout=2.0)
        except DATABASE_ERRORS as exc:  # (TimeoutError is an OSError)
            log.info("could not remove this instance's liveness row (%s): it will age out", exc)
