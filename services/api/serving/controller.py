"""The service controller: keeps each service's replicas running, rolls them over to a new
revision one at a time, drains before it stops, and deletes a service once drained.

It runs in every API process and acts only in the one that holds the controller's
Postgres advisory lock (``ControllerLease``), on that lock's own connection: as the
scheduler's leader does, the connection is the fence, since a lost connection releases
the lock and fails the transaction under way with it. A pass looks at every service
every ``period_s`` (sooner when a route of this process changed one: ``wake``); each
service is one transaction that locks its row, so a route's change and a step of the
controller never interleave.

What one step does (``reconcile``), from the replicas as Postgres has them:

- a replica whose job ended (cancelled by hand, failed to be placed for good) is
  forgotten, and so replaced;
- too few replicas of the current revision: new ones, created through the API's own
  submission path (quotas, placement, inputs, logs all as for any job) with the
  owner's own rights as they are now, with ``CORRAL_SERVICE_NAME`` and
  ``CORRAL_SERVICE_REVISION`` in their environment. A refusal (the owner lost the VC or
  a model's group) is the service's status until a replica can be created. While
  replicas of an older revision remain, one new replica at a time (a surge of one):
  the next is created only once an old one has been stopped;
- an old replica is drained only once a new one is ready (``status.replica_is_ready``)
  and the ready new ones plus the old ones outnumber the replicas wanted, one at a time;
- too many replicas of the current revision (scaled down): the extra ones are drained,
  not-ready and newest first;
- a draining replica is out of the gateway's rotation at once (``draining_at``) and its
  job is cancelled through the normal cancel path ``drain_s`` later;
- a deleted service drains every replica, and its row goes once their jobs have ended.

A replica that crashes is not the controller's to restart: its job never ends on its own
(the launcher puts it back in the queue with a growing delay), so it stays the same
replica with more restarts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import asyncpg

from services.api.jobs.admission import ShapeCache
from services.api.jobs.cancellation import cancel_job
from services.api.jobs.repository import JobRepository, JobWrites
from services.api.jobs.submission import Submitter
from services.api.models.repository import Reader
from services.api.serving.repository import ReplicaRow, ServiceRow, ServiceWrites
from services.api.serving.status import TERMINAL, replica_is_ready
from shared.aio import raise_if_cancelling
from shared.db.pool import DATABASE_ERRORS, Connection, Database, commit_scope, init_connection, password_from
from shared.errors import CorralError, Forbidden
from shared.jobs import JobSpec

log = logging.getLogger(__name__)

CONTROLLER_LOCK = 0x0C0A_5E4C  # "the service controller" among Corral's advisory locks
PERIOD_S = 0.5
# A service whose replica was refused (or whose step failed) is tried again this much
# later, or as soon as a route changes it.
REFUSED_RETRY_S = 30.0


@dataclass
class Step:
    """What one ``reconcile`` did to a service, for logs and tests."""

    created: list[str] = field(default_factory=list)
    drained: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    deleted: bool = False
    may_create: bool = True
    held_back: bool = False  # a replica was wanted but not created
    refused: str = ""  # why the owner's submit refused a replica, this step

    def __bool__(self) -> bool:
        return bool(self.created or self.drained or self.cancelled or self.forgotten or self.deleted)


class _JobsInTransaction(JobRepository):
    """The jobs slice's repository bound to the controller's open transaction, so that a
    replica's job (or its cancel) commits together with its link to the service: a crash
    between the two can leave neither a job without a link nor a link without a job."""

    def __init__(self, db: Database, conn: Connection) -> None:
        super().__init__(db)
        self._conn = conn

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[JobWrites]:
        yield JobWrites(self._conn)

    async def submit_at_once(self, *_args: object, **_kwargs: object) -> None:
        return None  # the one-statement submit commits on its own: never inside this transaction


def replica_spec(template: JobSpec, name: str, revision: int) -> JobSpec:
    """The job of a new replica: the template, told which service and revision it serves.

    Validated as any submitted spec is (a ``ValidationError`` otherwise): the two
    variables count against the role's limits (``MAX_ENV_VARS``), so a template without
    room for them is refused when it is created or changed, never stored to make jobs
    that no node could start."""
    document = template.model_dump(mode="json")
    role = document["tasks"][0]
    role["env"] = {**role["env"], "CORRAL_SERVICE_NAME": name, "CORRAL_SERVICE_REVISION": str(revision)}
    return JobSpec.model_validate(document)


def as_owner(owner: str, role: str | None) -> Reader:
    """The rights a service's replicas are checked and submitted with: its owner's own,
    as the users table has them now (an admin owner may use every VC), whoever changed
    the service last. Refused once the owner is no user."""
    if role is None:
        raise Forbidden(f"the service's owner {owner} is no longer a user")
    return Reader(owner, role == "admin")


def vc_user(rights: Reader) -> str | None:
    """Whom VC access lists apply to (``Principal.vc_user``): None for an admin."""
    return None if rights.is_admin else rights.username


async def reconcile(
    conn: Connection, db: Database, shapes: ShapeCache, name: str, *, may_create: bool = True
) -> Step:
    """One step for one service, inside the caller's transaction on ``conn``. Without
    ``may_create`` (its last replica was refused a moment ago) it does all but create
    replicas, and the refusal stays in the service's status."""
    writes = ServiceWrites(conn)
    jobs = _JobsInTransaction(db, conn)
    step = Step(may_create=may_create)
    service = await writes.lock_service(name)
    if service is None:
        return step
    live: list[ReplicaRow] = []
    for replica in await writes.replicas_of(name):
        if replica.job_state in TERMINAL:
            await writes.forget_replica(replica.job_id)
            step.forgotten.append(replica.job_id)
        else:
            live.append(replica)
    drain_s = service.template.service.drain_s if service.template.service else 0.0
    for replica in live:
        drained = replica.drained_s is not None and replica.drained_s >= drain_s
        if drained and replica.cancel_requested_at is None:
            await cancel_job(jobs, replica.job_id, f"service {name}", lambda _owner: True)
            step.cancelled.append(replica.job_id)
    if service.deleting_at is not None:
        await _drain(writes, [r for r in live if r.draining_at is None], step)
        if not live:
            await writes.delete_service(name)
            step.deleted = True
        return step
    await _converge(writes, jobs, shapes, service, live, step)
    # A refusal stays the service's word until every replica wanted could be created.
    blocked = step.refused or (service.blocked_reason if step.held_back else "")
    if blocked != service.blocked_reason:
        await writes.set_blocked_reason(name, blocked)
    return step


async def _converge(
    writes: ServiceWrites,
    jobs: _JobsInTransaction,
    shapes: ShapeCache,
    service: ServiceRow,
    live: list[ReplicaRow],
    step: Step,
) -> None:
    wanted = service.replicas
    serving = [r for r in live if r.draining_at is None]
    current = [r for r in serving if r.revision == service.revision]
    old = [r for r in serving if r.revision != service.revision]
    if not old:
        extra = len(current) - wanted
        if extra > 0:
            await _drain(writes, _drain_order(current)[:extra], step)
        for _ in range(max(0, -extra)):
            await _create(writes, jobs, shapes, service, step)
        return
    if wanted == 0:
        await _drain(writes, serving, step)
        return
    if len(current) > wanted:
        await _drain(writes, _drain_order(current)[: len(current) - wanted], step)
        return
    # A rollout: surge one. Replicas still stopping count until their cancel is asked for.
    stopping = [r for r in live if r.draining_at is not None and r.cancel_requested_at is None]
    ready_new = sum(1 for r in current if replica_is_ready(r))
    if not stopping and ready_new >= 1 and ready_new + len(old) > wanted:
        await _drain(writes, _drain_order(old)[:1], step)
        return
    occupying = len(serving) + len(stopping)
    if len(current) < wanted and occupying < wanted + 1:
        await _create(writes, jobs, shapes, service, step)


def _drain_order(replicas: list[ReplicaRow]) -> list[ReplicaRow]:
    """Which to stop first: those not ready (they serve nothing), then the newest."""
    # Ids are time-ordered: they tell apart the replicas one step created together.
    newest_first = sorted(replicas, key=lambda r: (r.created_at, r.job_id), reverse=True)
    return sorted(newest_first, key=replica_is_ready)


async def _drain(writes: ServiceWrites, replicas: list[ReplicaRow], step: Step) -> None:
    for replica in replicas:
        await writes.mark_draining(replica.job_id)
        step.drained.append(replica.job_id)


async def _create(
    writes: ServiceWrites, jobs: _JobsInTransaction, shapes: ShapeCache, service: ServiceRow, step: Step
) -> None:
    """A replica, submitted as its owner: the owner's VC access and the owner's right to
    read each input are checked again for every replica (a user who lost the VC or a
    model's group gets no new replica). A refusal (a ``CorralError``) undoes this replica
    only (a savepoint): the rest of the step stands, and ``step.refused`` says why."""
    if not step.may_create or step.refused:
        step.held_back = True
        return
    try:
        async with writes.conn.transaction():
            rights = as_owner(service.owner, await writes.owner_role(service.owner))
            spec = replica_spec(service.template, service.name, service.revision)
            submitted = await Submitter(jobs, shapes).submit(spec, rights.username, vc_user(rights))
            await writes.insert_replica(submitted.job.id, service.name, service.revision)
    except CorralError as exc:
        step.refused = f"cannot create a replica: {exc.detail}"
        step.held_back = True
        return
    step.created.append(submitted.job.id)


class ControllerLease:
    """The controller's advisory lock, held on a connection of its own (as the scheduler's
    leader holds its own): standbys try again every ``retry_s``."""

    def __init__(self, database_url: str, *, password_file: Path | None = None) -> None:
        self._url = database_url
        self._password = password_from(password_file)
        self.conn: Connection | None = None

    async def acquire(self) -> Connection | None:
        """The lock's connection if this process holds the lock (now or already)."""
        if self.conn is not None and not self.conn.is_closed():
            return self.conn
        self.conn = None
        try:
            conn: Connection = await asyncpg.connect(self._url, password=self._password, timeout=10)
        except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
            raise_if_cancelling()
            log.warning("service controller: cannot connect (%s)", exc)
            return None
        try:
            if await conn.fetchval("SELECT pg_try_advisory_lock($1)", CONTROLLER_LOCK, timeout=10):
                await init_connection(conn)
                self.conn = conn
                log.info("this API process now runs the service controller")
                return conn
        except DATABASE_ERRORS as exc:
            raise_if_cancelling()
            log.warning("service controller: lock not taken (%s)", exc)
        conn.terminate()
        return None

    def release(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()  # the session's end gives the lock back


@dataclass(frozen=True)
class _Held:
    """A service whose last step failed: what it said, and until when (by the monotonic
    clock) no replica is tried for it again, unless a route changes it first."""

    said: str
    until: float
    updated_at: datetime
    broken: bool  # not a refusal: an unexpected error, and the whole step waits

    def waits(self, now: float, updated_at: datetime) -> bool:
        return now < self.until and updated_at == self.updated_at


class ServiceController:
    def __init__(
        self,
        db: Database,
        shapes: ShapeCache,
        lease: ControllerLease,
        *,
        period_s: float = PERIOD_S,
        retry_s: float = 2.0,
        refused_retry_s: float = REFUSED_RETRY_S,
    ) -> None:
        self.db = db
        self.shapes = shapes
        self.lease = lease
        self.period_s = period_s
        self.retry_s = retry_s
        self.refused_retry_s = refused_retry_s
        self.woken = asyncio.Event()
        self._held: dict[str, _Held] = {}

    def wake(self) -> None:
        """A service changed in this process: look at it now rather than at the next tick."""
        self.woken.set()

    async def run(self) -> None:
        """Forever: hold the lock (or wait for it) and reconcile every service each pass."""
        try:
            while True:
                conn = await self.lease.acquire()
                if conn is None:
                    await asyncio.sleep(self.retry_s)
                    continue
                self.woken.clear()  # before the pass: a change made during it wakes the next
                try:
                    await self.pass_once(conn)
                except DATABASE_ERRORS as exc:
                    raise_if_cancelling()
                    log.warning("service controller pass failed (%s); standing down", exc)
                    self.lease.release()
                    continue
                with suppress(TimeoutError):
                    await asyncio.wait_for(self.woken.wait(), self.period_s)
        finally:
            self.lease.release()

    async def pass_once(self, conn: Connection) -> dict[str, Step]:
        """One step for every service, each in its own transaction on ``conn``.

        One service never stops the others: a replica its owner's submit refuses (the VC
        or an input is no longer theirs, the cluster shrank) is written to the service's
        status (``blocked_reason``), and anything a step raises (a stored template that
        no longer reads) undoes that step and is logged with the service's name. Either
        way no replica is tried for it again before ``refused_retry_s``, unless a route
        changes it: never at every pass. Only Postgres's errors end the pass: the lock's
        connection may be gone."""
        services = await ServiceWrites(conn).service_names()
        self._held = {name: held for name, held in self._held.items() if name in services}
        steps: dict[str, Step] = {}
        now = time.monotonic()
        for name, updated_at in services.items():
            held = self._held.get(name)
            waiting = held is not None and held.waits(now, updated_at)
            if held is not None and held.broken and waiting:
                continue
            try:
                with commit_scope(conn):
                    async with conn.transaction():
                        step = await reconcile(conn, self.db, self.shapes, name, may_create=not waiting)
            except DATABASE_ERRORS:
                raise
            except Exception as exc:
                raise_if_cancelling()
                self._broken(name, updated_at, exc)
                continue
            steps[name] = step
            if step.refused:
                self._refused(name, updated_at, step.refused)
            elif not step.held_back:
                self._held.pop(name, None)
            if step:
                log.info("service %s: %s", name, step)
        return steps

    def _refused(self, name: str, updated_at: datetime, reason: str) -> None:
        """Said once per new reason; ``reconcile`` wrote it to the service's status."""
        held = self._held.get(name)
        if held is None or held.said != reason:
            log.warning("service %s: %s", name, reason)
        self._held[name] = _Held(reason, time.monotonic() + self.refused_retry_s, updated_at, broken=False)

    def _broken(self, name: str, updated_at: datetime, exc: Exception) -> None:
        said = f"{type(exc).__name__}: {exc}"
        held = self._held.get(name)
        if held is None or held.said != said:
            log.error("service %s: the controller could not act on it; skipped", name, exc_info=exc)
        self._held[name] = _Held(said, time.monotonic() + self.refused_retry_s, updated_at, broken=True)
