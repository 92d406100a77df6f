"""What a node agent may do in Postgres, and nothing more: the ``launcher.node_*``
functions (migration 0025), each called with the node's id and secret.

The agent's database role (``corral_agent``) has no table privilege at all. Each
function checks the secret against ``launcher.node_credentials``, then acts for that
node's own attempts only: register and renew its lease, claim an attempt (with what its
task needs: spec, secrets, peers), mark it running and ended, tell of one over its share
of a GPU, list its live attempts and their states, record a dead letter and its liveness.
The events of a report are built here, as ``shared.outbox.outbox_row`` rows, and handed
to the function, which checks they are about that attempt and node, writes them and
NOTIFYs the launcher's relay (the agent relays nothing: it may not read the outbox).
Ending an attempt NOTIFYs the launcher too, which decides the job
(``services/launcher/attempt_ends.py``).

Without a secret (``None``) the functions accept only a session that may change the
attempts itself: a test or a tool running an agent as the owner.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import asyncpg

from shared.bus.protocol import Delivery
from shared.db.pool import Database
from shared.db.queries import Queries
from shared.events import JobRunning, TaskExited, TaskOverLimit, TaskStarted
from shared.liveness import Liveness
from shared.outbox import outbox_row

SQL = Queries(Path(__file__).parent / "sql")


class NodeRepository:
    """The agent's statements, each for ``node_id`` with its ``secret``."""

    def __init__(self, db: Database, node_id: str, secret: str | None) -> None:
        self.db = db
        self.node_id = node_id
        self._secret = secret

    @property
    def _me(self) -> tuple[str, str | None]:
        return self.node_id, self._secret

    async def register(self, lease_s: float, isolation: str, isolation_detail: str, machine_cpus: int) -> int:
        """A new epoch for the node: whatever an earlier incarnation held is fenced."""
        epoch = await self.db.fetchval(
            SQL.register, *self._me, lease_s, isolation, isolation_detail, machine_cpus
        )
        return int(epoch)

    async def renew_lease(self, epoch: int | None, lease_s: float) -> int | None:
        """The epoch, or None when the lease was lost meanwhile."""
        renewed = await self.db.fetchval(SQL.renew_lease, *self._me, epoch, lease_s)
        return None if renewed is None else int(renewed)

    async def claim_attempt(self, attempt_id: str, epoch: int | None) -> dict[str, Any] | None:
        """ASSIGNED → STARTING, with what the task needs to start; None when it is not to
        be started (claimed already, stopped, its job moved on, the lease lost)."""
        row = await self.db.fetchrow(SQL.claim_attempt, *self._me, attempt_id, epoch)
        return None if row is None else dict(row)

    async def attempt_storage(self, attempt_id: str) -> list[asyncpg.Record]:
        """The storage configs (name, kind, source, read_only) its job uses, as they are
        now, while the attempt is STARTING here; a config deleted meanwhile is absent."""
        return await self.db.fetch(SQL.attempt_storage, *self._me, attempt_id)

    async def attempt_ssh(self, attempt_id: str) -> asyncpg.Record | None:
        """The job's keys and the public keys that may log in, for a STARTING attempt of a
        generic job with ``ssh`` here; None for any other."""
        return await self.db.fetchrow(SQL.attempt_ssh, *self._me, attempt_id)

    async def mark_running(
        self,
        attempt_id: str,
        pid: int | None,
        pid_start_ticks: int | None,
        log_path: str | None,
        started: TaskStarted,
        job_running: JobRunning,
    ) -> asyncpg.Record | None:
        """STARTING → RUNNING with ``started``; the job's first task to run also makes the
        job RUNNING with ``job_running``. None when the attempt was not this node's to
        start any more; else ``job_running`` (whether the job changed too), ``in_state_s``
        and ``age_s``."""
        job_id = started.data.job_id
        return await self.db.fetchrow(
            SQL.mark_running,
            *self._me,
            attempt_id,
            pid,
            pid_start_ticks,
            log_path,
            *outbox_row(started, job_id),
            *outbox_row(job_running, job_id),
        )

    async def mark_exited(self, *, lost: bool, exited: TaskExited) -> bool:
        """The attempt's end, with ``exited``; False when it was not this node's to report."""
        data = exited.data
        job_id = await self.db.fetchval(
            SQL.mark_exited,
            *self._me,
            data.attempt_id,
            "LOST" if lost else "EXITED",
            data.exit_code,
            data.signal,
            data.reason,
            data.classification,
            *outbox_row(exited, data.job_id),
        )
        return job_id is not None

    async def set_readiness(self, attempt_id: str, ready: bool, detail: str) -> bool:
        """Record a running task's readiness; False once it is not RUNNING any more."""
        return bool(await self.db.fetchval(SQL.set_readiness, *self._me, attempt_id, ready, detail))

    async def record_gpu_use(self, used_mb: dict[str, int]) -> int:
        """Record what these running sharers use of their GPU's memory (MiB, by attempt);
        how many rows changed (an attempt not RUNNING here any more is left alone)."""
        attempts = sorted(used_mb)
        return int(
            await self.db.fetchval(SQL.record_gpu_use, *self._me, attempts, [used_mb[a] for a in attempts])
        )

    async def report_over_limit(self, over: TaskOverLimit) -> bool:
        """Tell of a sharing task over its share (``over``); False when its attempt is not
        RUNNING here any more (nothing is written)."""
        data = over.data
        return bool(
            await self.db.fetchval(
                SQL.report_over_limit, *self._me, data.attempt_id, *outbox_row(over, data.job_id)
            )
        )

    async def live_attempts(self) -> list[asyncpg.Record]:
        """The node's attempts ASSIGNED, STARTING or RUNNING, with their jobs' specs and GPUs."""
        return await self.db.fetch(SQL.live_attempts, *self._me)

    async def attempt_state(self, attempt_id: str) -> str | None:
        row = await self.db.fetchrow(SQL.attempt_states, *self._me, [attempt_id])
        return None if row is None else str(row["state"])

    async def expired_task_logs(
        self,
        job_ids: list[str],
        roles: list[str],
        indexes: list[int],
        attempt_nos: list[int],
        older_than_s: float,
    ) -> list[asyncpg.Record]:
        """Of these log files (one each), those of the node's attempts that ended more than
        ``older_than_s`` ago (``services/launcher/log_retention.py``)."""
        return await self.db.fetch(
            SQL.expired_task_logs, *self._me, job_ids, roles, indexes, attempt_nos, older_than_s
        )

    async def record_dead_letter(self, consumer: str, delivery: Delivery, reason: str) -> None:
        await self.db.execute(
            SQL.record_dead_letter,
            *self._me,
            consumer,
            delivery.subject,
            delivery.stream_seq,
            reason[:4000],
            delivery.data,
            delivery.headers,
        )

    async def beat(self, instance_id: str) -> None:
        await self.db.execute(SQL.beat, *self._me, instance_id, socket.gethostname(), os.getpid())

    async def goodbye(self, instance_id: str) -> None:
        await self.db.execute(SQL.goodbye, *self._me, instance_id)


class NodeLiveness(Liveness):
    """The agent's liveness row (``shared/liveness.py``), through its functions. It prunes
    nothing: the services' instances do."""

    def __init__(self, records: NodeRepository, service: str, interval_s: float) -> None:
        super().__init__(records.db, service, interval_s)
        self._records = records

    async def beat(self) -> None:
        await self._records.beat(self.instance_id)

    async def prune(self) -> None:
        return None

    async def forget(self) -> None:
        await self._records.goodbye(self.instance_id)


class NodeDeadLetters:
    """What the agent's consumers gave up on (``shared/deadletters.py``), through its functions."""

    def __init__(self, records: NodeRepository) -> None:
        self._records = records

    async def record(self, consumer: str, delivery: Delivery, reason: str) -> None:
        await self._records.record_dead_letter(consumer, delivery, reason)
