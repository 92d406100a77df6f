"""Deciding a job the moment one of its attempts ends on a node.

A node agent records an attempt's end through its node's function
(``launcher.node_mark_exited``, migration 0025), which NOTIFYs ``corral_attempt_ended``
with the job's id (and the ``traceparent`` of the task's end: the decision, and the
events it writes, join that trace). The agent may not decide the job itself: that writes ``api.jobs`` and
the rest of the gang's attempts, which a node's database role may not touch. The
launcher LISTENs on one connection of its pool and decides each job so named
(``reporting.decide_job``: the completion rules, the retry table, stopping the rest of
a gang) at once. Its events go through a relay pass, after the agent's ``task.exited``
in the same partition, never overtaking it on the stream (``following_others``).

Concurrency: the listener only queues job ids; ``concurrency`` workers decide them, so
decisions run side by side (each in its own transaction, on a pooled connection) but a
burst of ends never holds more than that many connections. A job named again while it
waits in the queue is decided once; named again while being decided (its gang's next
task ended meanwhile), once more afterwards. With several launchers, each decides only
the jobs of its shard (``shards.py``); were two to decide one job, the job's row lock
would order them and the second would find nothing left to do.

A NOTIFY is lost while the listening connection is (Postgres restarting, the launcher
down): the reconcile loop (``reconcile.py``, ``active_jobs_to_evaluate``)
decides those jobs within its interval, as it always did for a decision that failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from services.launcher.reporting import decide_job
from services.launcher.shards import WHOLE, Shard
from shared.aio import raise_if_cancelling
from shared.db.pool import DATABASE_ERRORS, Database
from shared.logs import bound_job
from shared.outbox import following_others
from shared.telemetry import continue_trace

log = logging.getLogger(__name__)

CHANNEL = "corral_attempt_ended"


class AttemptEnds:
    """Decides the jobs whose attempts a node reported ended (see the module doc)."""

    def __init__(
        self, db: Database, *, concurrency: int = 4, check_every_s: float = 5.0, shard: Shard = WHOLE
    ) -> None:
        self._db = db
        self._shard = shard
        self._concurrency = concurrency
        self._check_every_s = check_every_s  # how often the idle listener checks its connection
        self._queue: asyncio.Queue[tuple[str, str | None]] = asyncio.Queue()
        self._queued: set[str] = set()
        self.decided = 0

    async def run(self) -> None:
        """Listen and decide forever (a root task of the launcher)."""
        async with asyncio.TaskGroup() as tg:
            for n in range(self._concurrency):
                tg.create_task(self._decide_forever(), name=f"decide-{n}")
            tg.create_task(self._listen_forever(), name="attempt-ends-listener")

    def ended(self, job_id: str, traceparent: str | None = None) -> None:
        """Queue ``job_id`` to be decided, unless it already waits or another launcher
        decides it."""
        if job_id not in self._queued and self._shard.owns(job_id):
            self._queued.add(job_id)
            self._queue.put_nowait((job_id, traceparent))

    async def _decide_forever(self) -> None:
        while True:
            job_id, traceparent = await self._queue.get()
            self._queued.discard(job_id)  # (from now on a new NOTIFY queues it again)
            with (
                continue_trace(traceparent, "decide job", {"corral.job.id": job_id}),
                bound_job(job_id),
                following_others(),  # after the agent's task.exited on the stream (shared/outbox)
            ):
                await decide_job(self._db, job_id)  # (a failure is logged: reconcile takes it)
            self.decided += 1

    async def _listen_forever(self) -> None:
        while True:
            try:
                async with self._db.connection() as listener:
                    await listener.add_listener(CHANNEL, self._on_notify)
                    try:
                        while True:  # a connection lost says nothing: ask it now and then
                            await asyncio.sleep(self._check_every_s)
                            await listener.fetchval("SELECT 1", timeout=self._check_every_s)
                    finally:
                        with contextlib.suppress(*DATABASE_ERRORS):
                            await listener.remove_listener(CHANNEL, self._on_notify)
            except DATABASE_ERRORS as exc:
                raise_if_cancelling()
                log.warning(
                    "lost the connection listening for ended attempts (%s); the reconcile loop decides "
                    "their jobs meanwhile; listening again in %.0fs",
                    exc,
                    self._check_every_s,
                )
                await asyncio.sleep(self._check_every_s)

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        if isinstance(payload, str) and payload:
            job_id, _, traceparent = payload.partition(" ")
            self.ended(job_id, traceparent or None)
