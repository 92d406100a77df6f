"""The artifact pipe on real Postgres and NATS: the launcher's artifact server and node
agents in this process, jobs and attempts written as the scheduler would leave them, and
the launcher's own decision (``evaluate_job``) once their tasks end."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.launcher.agent.agent import NodeAgent
from services.launcher.agent.artifacts import TaskArtifacts
from services.launcher.agent.sandbox.sandbox import Sandbox
from services.launcher.artifacts.repository import ArtifactRecords
from services.launcher.artifacts.server import ArtifactServer
from services.launcher.artifacts.staging import Staging
from services.launcher.outcomes import evaluate_job
from shared.artifacts.store import ArtifactStore, DirectoryStore
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.ids import new_attempt_id
from shared.jobs import JobSpec


@contextlib.asynccontextmanager
async def serving(db: Database, bus: NatsBus, root: Path, store: ArtifactStore) -> AsyncIterator[None]:
    """The launcher's side over ``store``, answering on every node's subjects."""
    server = ArtifactServer(ArtifactRecords(db), store, Staging(root / "staging"), max_blob_bytes=1 << 30)
    answering = asyncio.create_task(server.serve(bus.nc))
    await asyncio.sleep(0.1)  # (subscribed)
    try:
        yield
    finally:
        answering.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await answering


@contextlib.asynccontextmanager
async def artifact_server(
    db: Database, bus: NatsBus, root: Path, store: DirectoryStore | None = None
) -> AsyncIterator[DirectoryStore]:
    """The launcher's side over a directory store (``root/store`` unless given); the store."""
    store = store or DirectoryStore(root / "store")
    async with serving(db, bus, root, store):
        yield store


@contextlib.asynccontextmanager
async def node(
    db: Database,
    bus: NatsBus,
    root: Path,
    node_id: str,
    *,
    sandbox: Sandbox | None = None,
    max_output_bytes: int = 1 << 30,
) -> AsyncIterator[NodeAgent]:
    """A node agent of its own (``root/<node>``), registered; its tasks fenced at the end."""
    await db.execute(
        "INSERT INTO monitor.nodes (id, hostname, simulated, state, gpu_count, last_heartbeat)"
        " VALUES ($1, $1, true, 'READY', 8, now()) ON CONFLICT (id) DO NOTHING",
        node_id,
    )
    home = root / node_id
    async with asyncio.TaskGroup() as tg:
        agent = NodeAgent(
            db,
            tg,
            node_id=node_id,
            log_dir=home / "logs",
            state_dir=home / "state",
            work_dir=home / "work",
            stop_grace_s=0.5,
            sandbox=sandbox,
            artifacts=TaskArtifacts(
                bus.nc,
                node_id,
                home / "work" / ".input-cache",
                max_output_bytes=max_output_bytes,
                patience_s=5,
            ),
        )
        await agent.register(lease_s=30)
        try:
            yield agent
        finally:
            agent.fence_all("the test is over")


class HeldStore(DirectoryStore):
    """A directory store whose first put of a blob over ``hold_over`` bytes waits for
    ``release``, saying when it began (``holding``): an upload caught in the middle."""

    def __init__(self, root: Path, hold_over: int) -> None:
        super().__init__(root)
        self.hold_over = hold_over
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def put(self, sha256: str, source: Path) -> None:
        if not self.holding.is_set() and await asyncio.to_thread(os.path.getsize, source) > self.hold_over:
            self.holding.set()
            await self.release.wait()
        await super().put(sha256, source)


def job_spec(command: str, *, instances: int = 1, **extra: Any) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": "train",
            "tasks": [{"name": "worker", "instances": instances, "command": command}],
            **extra,
        }
    )


async def submitted(db: Database, spec: JobSpec) -> str:
    """A job as submitted, then its spec as given (inputs already pinned: see ``pinned_input``)."""
    plain = spec.model_copy(update={"inputs": []})
    job_id = (await Submitter(JobRepository(db)).submit(plain, "alice", None)).job.id
    await db.execute("UPDATE api.jobs SET spec = $2 WHERE id = $1", job_id, spec.model_dump(mode="json"))
    return job_id


async def placed(db: Database, job_id: str, nodes: list[str], generation: int = 1) -> list[str]:
    """The job's generation placed: one ASSIGNED attempt of task ``worker-i`` on ``nodes[i]``."""
    await db.execute(
        "UPDATE api.jobs SET state = 'SCHEDULED', generation = $2 WHERE id = $1", job_id, generation
    )
    ids: list[str] = []
    for index, node_id in enumerate(nodes):
        attempt_id = new_attempt_id()
        await db.execute(
            "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no,"
            " node_id, gpu_indices, state, ports) VALUES ($1, $2, $3, 'worker', $4, $3, $5, '{}', 'ASSIGNED',"
            " '{}')",
            attempt_id,
            job_id,
            generation,
            index,
            node_id,
        )
        ids.append(attempt_id)
    return ids


async def ended(db: Database, attempt_id: str, timeout_s: float = 20.0) -> dict[str, Any]:
    for _ in range(int(timeout_s / 0.05)):
        row = await db.fetchrow(
            "SELECT state, exit_code, classification, reason FROM launcher.attempts WHERE id = $1", attempt_id
        )
        assert row is not None
        if row["state"] in ("EXITED", "LOST"):
            return dict(row)
        await asyncio.sleep(0.05)
    raise AssertionError(f"attempt {attempt_id} did not end within {timeout_s}s")


async def decided(db: Database, job_id: str) -> dict[str, Any]:
    """The launcher's decision on the job, and the job's row after it."""
    async with db.transaction() as conn:
        await evaluate_job(conn, job_id)
    row = await db.fetchrow("SELECT state, reason FROM api.jobs WHERE id = $1", job_id)
    assert row is not None
    return dict(row)


async def artifacts_of(db: Database, job_id: str) -> dict[str, dict[str, Any]]:
    rows = await db.fetch(
        "SELECT output, manifest, files, size_bytes, sha256 FROM launcher.artifacts WHERE job_id = $1", job_id
    )
    return {row["output"]: dict(row) for row in rows}
