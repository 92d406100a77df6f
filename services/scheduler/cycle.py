"""The scheduling cycle: snapshot → policy → one transaction of decisions.

Runs when an event wakes it (a job submitted or ended, a node registered) and every
``cycle_interval_s`` regardless, only on the active scheduler. All decisions of one
cycle commit together on the leader's fenced connection (see ``leader.py``), with why
each job left waiting waits (``scheduler.pending_status``: only the rows that changed)
and the order they wait in (``scheduler.queue_order``, when it changed).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Hashable
from dataclasses import replace

import asyncpg

from services.scheduler import metrics
from services.scheduler.decisions import commit_decisions
from services.scheduler.leader import Leadership
from services.scheduler.model import Waiting
from services.scheduler.planner import PlanSettings, plan
from services.scheduler.preemption import evict_from_drained_nodes, request_preemption
from services.scheduler.repository import finished_waits, write_pending_status
from services.scheduler.snapshot import PendingJobs, load_snapshot
from services.scheduler.starvation import StarvationRule, TypicalWait
from shared.aio import raise_if_cancelling, wait_event
from shared.db.pool import Connection, commit_scope

log = logging.getLogger(__name__)

MAX_PENDING_PER_CYCLE = 5000


TYPICAL_WAIT_EVERY_S = 60.0  # how often the jobs finished since are folded into the typical wait
# How far back a new leader folds finished jobs in: four time constants leave the older
# ones under 2% of the average.
TYPICAL_WAIT_HISTORY = 4


class Cycle:
    def __init__(
        self,
        leadership: Leadership,
        interval_s: float,
        policy: PlanSettings | None = None,
        starvation: StarvationRule | None = None,
        *,
        min_gap_s: float = 0.0,
    ) -> None:
        """``starvation``: the load-aware starvation limit (None: ``policy``'s fixed one).
        ``min_gap_s``: a woken cycle waits until this long after the last one ended."""
        self._leadership = leadership
        self._interval_s = interval_s
        self._min_gap_s = min_gap_s
        self._policy = policy or PlanSettings()
        self._starvation = starvation
        self._typical = TypicalWait(starvation.window_s if starvation else 1.0)
        self._typical_wait_at = -math.inf
        self.last_settings = self._policy
        self._wakeup = asyncio.Event()
        self.cycles = 0
        self.placed = 0
        self.preempted = 0
        self._said: dict[str, Hashable] = {}  # why each job waits, as last written
        self._order: list[str] | None = None  # the queue's order, as last written (None: unknown)
        self._pending = PendingJobs()  # what the pending jobs ask for, read once each

    def wake(self) -> None:
        self._wakeup.set()

    async def run(self) -> None:
        """Cycle when woken (or every ``interval_s``), never sooner than ``min_gap_s``
        after the last cycle ended.

        The gap costs a job on an idle cluster nothing (its cycle starts at once) and
        under load saves more than it costs. Without it, when jobs end every few
        milliseconds (bench.e2e), each event gets its own cycle, each reading and
        ranking the whole queue; with a gap a few ends share one, so the scheduler and
        Postgres spend less CPU per job, for a GPU idle a few milliseconds longer. Too
        short a gap saves little, too long a one leaves GPUs idle (docs/performance.md
        has the figures behind the default).
        """
        loop = asyncio.get_running_loop()
        while True:
            await self._leadership.acquired.wait()
            self._wakeup.clear()
            await self.run_once()
            ended = loop.time()
            await wait_event(self._wakeup, self._interval_s)
            if (gap := ended + self._min_gap_s - loop.time()) > 0:
                await asyncio.sleep(gap)

    async def run_once(self) -> int:
        async with self._leadership.lock:
            conn = self._leadership.conn
            if conn is None:
                # Not leading: another scheduler may write the reasons and order meanwhile.
                self._said, self._order = {}, None
                metrics.record_standing_down()
                return 0
            metrics.LEADER.set(1)
            started = time.perf_counter()
            try:
                # (Its scope: the decisions' events are published as soon as they commit.)
                with commit_scope(conn):
                    async with conn.transaction():
                        for job_id in await evict_from_drained_nodes(conn):
                            log.warning("job %s preempted: its node was drained with eviction", job_id)
                        snapshot = await load_snapshot(conn, MAX_PENDING_PER_CYCLE, known=self._pending)
                        pending = snapshot.pending
                        result = plan(
                            pending,
                            snapshot.nodes,
                            running=snapshot.running,
                            vcs=snapshot.vcs,
                            largest_unready_node=snapshot.largest_unready_node,
                            settings=await self._settings_now(conn),
                        )
                        placed = await commit_decisions(conn, result.decisions)
                        preempted = 0
                        for preemption in result.preemptions:
                            if await request_preemption(conn, preemption.job_id, preemption.reason):
                                log.info("job %s preempted: %s", preemption.job_id, preemption.reason)
                                preempted += 1
                        said = {w.job_id: _said_key(w) for w in result.waiting}
                        changed = [w for w in result.waiting if self._said.get(w.job_id) != said[w.job_id]]
                        order = [w.job_id for w in result.waiting]
                        # What this scheduler wrote is all there is, once it has committed a
                        # cycle as leader (``_order`` known): then only the jobs gone go.
                        gone = None if self._order is None else [j for j in self._said if j not in said]
                        await write_pending_status(
                            conn, changed, order, order_changed=order != self._order, gone=gone
                        )
            except asyncpg.PostgresError as exc:
                # Cancelled mid-query (shutdown), asyncpg may raise this instead of the
                # CancelledError; swallowing it would leave the TaskGroup waiting forever.
                raise_if_cancelling()
                log.warning("scheduling cycle failed (%s); will retry", exc)
                return 0
            except (OSError, asyncpg.InterfaceError, asyncpg.exceptions.InternalClientError) as exc:
                raise_if_cancelling()
                # The connection itself is in trouble (cut off mid-query, it may come back
                # "busy"): its lock (and our leadership) may be gone. Stand down; a fresh
                # campaign decides who leads next.
                log.warning("scheduling cycle lost its connection (%s); standing down", exc)
                await self._leadership.resign()
                return 0
        # Remembered only once committed: a failed cycle writes its reasons again.
        self._said, self._order = said, order
        self.cycles += 1
        self.placed += placed
        self.preempted += preempted
        metrics.CYCLE_DURATION.observe(time.perf_counter() - started)
        metrics.PLACEMENTS.inc(placed)
        metrics.PREEMPTIONS.inc(preempted)
        metrics.record_cycle(pending, result, snapshot.running)
        if placed:
            log.info(
                "cycle placed %d of %d pending jobs in %.1f ms",
                placed,
                len(pending),
                (time.perf_counter() - started) * 1000,
            )
        return placed

    async def _settings_now(self, conn: Connection) -> PlanSettings:
        """The policy with this cycle's starvation limit: load-aware, from the typical wait,
        into which the jobs finished since are folded once a minute."""
        if self._starvation is None:
            return self._policy
        now = time.monotonic()
        if now - self._typical_wait_at >= TYPICAL_WAIT_EVERY_S:
            after = self._typical.last_finish_s
            if after is None:
                after = time.time() - TYPICAL_WAIT_HISTORY * self._starvation.window_s
            for finished_s, waited_s in await finished_waits(conn, after):
                self._typical.finished(finished_s, waited_s)
            self._typical_wait_at = now
        self.last_settings = replace(self._policy, starve_after_s=self._starvation.limit(self._typical.value))
        return self.last_settings

    def settings(self) -> PlanSettings:
        """The policy as the last cycle applied it (what a dry run should answer with)."""
        return self.last_settings


def _said_key(waiting: Waiting) -> Hashable:
    """What is worth writing again when it changes: the estimate counts when it moves by
    more than ten seconds (it is recomputed from "now" every cycle). Not the position:
    the queue's order is written whole, once (``write_pending_status``)."""
    start = waiting.estimated_start_s
    when = None if start is None else round((time.time() + start) / 10)
    return (waiting.reason, waiting.detail, when)
