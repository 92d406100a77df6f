"""The node agent's core: claim an assignment, run it, report what became of it.

Concurrency model: the agent's TaskGroup (passed in) owns one watcher task per running
attempt; ``_watched`` names the attempts this process is watching, so the reconcile
loop never adopts an attempt twice. Every report is a fenced update (this node, the
expected state) plus an outbox event in one transaction: a report for an attempt this
agent no longer holds changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from services.launcher.agent.environment import task_environment
from services.launcher.agent.processes import (
    Exit,
    TaskFiles,
    is_same_process_alive,
    process_start_ticks,
    spawn,
    wait_adopted,
    wait_spawned,
)
from services.launcher.repository import SQL
from shared.db.pool import Database
from shared.events import Event, TaskAssigned, TaskExited, TaskStarted
from shared.events.types import TaskExitedData, TaskStartedData
from shared.jobs import JobSpec
from shared.outbox import append

log = logging.getLogger(__name__)
SOURCE = "corral/agent"


class NodeAgent:
    def __init__(
        self,
        db: Database,
        tg: asyncio.TaskGroup,
        *,
        node_id: str,
        log_dir: Path,
        state_dir: Path,
        work_dir: Path,
    ) -> None:
        self._db = db
        self._tg = tg
        self.node_id = node_id
        self._log_dir = log_dir
        self._state_dir = state_dir
        self._work_dir = work_dir
        self._watched: set[str] = set()

    async def handle(self, event: Event) -> None:
        if isinstance(event, TaskAssigned) and event.data.node_id == self.node_id:
            await self.start_attempt(event.data.attempt_id)

    async def start_attempt(self, attempt_id: str) -> None:
        if attempt_id in self._watched:
            return  # the consumer and the reconcile loop may both try; one is enough
        self._watched.add(attempt_id)
        try:
            await self._start_claimed(attempt_id)
        except BaseException:
            self._watched.discard(attempt_id)
            raise

    async def _start_claimed(self, attempt_id: str) -> None:
        async with self._db.transaction() as conn:
            claimed = await conn.fetchrow(SQL.claim_attempt, attempt_id, self.node_id)
        if claimed is None:
            self._watched.discard(attempt_id)
            return  # someone else's, already started, or its job moved on
        row = dict(claimed)
        spec = JobSpec.model_validate(row["spec"])
        role = next(t for t in spec.tasks if t.name == row["task_role"])
        job_id = row["job_id"]
        task = f"{role.name}-{row['task_index']}"
        log_path = self._log_dir / job_id / task / f"attempt-{row['attempt_no']}.log"
        files = TaskFiles.for_attempt(self._state_dir, attempt_id)
        env = task_environment(
            role,
            job_id=job_id,
            job_name=spec.name,
            task_index=row["task_index"],
            attempt_id=attempt_id,
            attempt_no=row["attempt_no"],
            gpu_indices=list(row["gpu_indices"]),
        )
        cwd = self._work_dir / job_id
        try:
            cwd.mkdir(parents=True, exist_ok=True)
            proc = await spawn(role.command, env, log_path, files, cwd)
        except OSError as exc:
            failure = Exit(None, None, f"could not start the task: {exc}")
            await self.report_exit(attempt_id, failure, lost=True)
            self._watched.discard(attempt_id)
            return
        async with self._db.transaction() as conn:
            marked = await conn.fetchval(
                SQL.mark_attempt_running,
                attempt_id,
                self.node_id,
                proc.pid,
                process_start_ticks(proc.pid),
                str(log_path),
            )
            if marked is not None:
                await self._announce_started(conn, attempt_id, job_id, proc.pid)
        self._watch(attempt_id, files, wait_spawned(proc, files))

    async def _announce_started(self, conn: Any, attempt_id: str, job_id: str, pid: int) -> None:
        event = TaskStarted(
            source=SOURCE,
            subject=attempt_id,
            data=TaskStartedData(attempt_id=attempt_id, job_id=job_id, node_id=self.node_id, pid=pid),
        )
        await append(conn, event, aggregate=job_id)

    def _watch(self, attempt_id: str, files: TaskFiles, waiter: Awaitable[Exit]) -> None:
        self._watched.add(attempt_id)

        async def watch() -> None:
            try:
                outcome = await waiter
                await self.report_exit(attempt_id, outcome, lost=False)
                files.remove()
            finally:
                self._watched.discard(attempt_id)

        self._tg.create_task(watch(), name=f"watch-{attempt_id}")

    async def report_exit(self, attempt_id: str, outcome: Exit, *, lost: bool) -> None:
        lost = lost or (outcome.exit_code is None and outcome.signal is None)
        async with self._db.transaction() as conn:
            job_id = await conn.fetchval(
                SQL.mark_attempt_exited,
                attempt_id,
                self.node_id,
                "LOST" if lost else "EXITED",
                outcome.exit_code,
                outcome.signal,
                outcome.reason,
            )
            if job_id is None:
                return  # not ours any more: report nothing
            event = TaskExited(
                source=SOURCE,
                subject=attempt_id,
                data=TaskExitedData(
                    attempt_id=attempt_id,
                    job_id=job_id,
                    node_id=self.node_id,
                    exit_code=outcome.exit_code,
                    signal=outcome.signal,
                    reason=outcome.reason,
                ),
            )
            await append(conn, event, aggregate=job_id)
        log.info("attempt %s ended: %s", attempt_id, outcome)

    async def reconcile(self) -> None:
        """Make the database and this node's processes agree (on start and periodically)."""
        rows = await self._db.fetch(SQL.live_attempts_on_node, self.node_id)
        for row in rows:
            attempt_id = row["id"]
            if attempt_id in self._watched:
                continue
            files = TaskFiles.for_attempt(self._state_dir, attempt_id)
            if row["state"] == "ASSIGNED":
                await self.start_attempt(attempt_id)
            elif row["state"] == "RUNNING" and is_same_process_alive(row["pid"], row["pid_start_ticks"]):
                log.info("re-adopting running attempt %s (pid %s)", attempt_id, row["pid"])
                self._watch(attempt_id, files, wait_adopted(row["pid"], row["pid_start_ticks"], files))
            elif row["state"] == "RUNNING" and files.read_exit_code() is not None:
                await self.report_exit(attempt_id, Exit(files.read_exit_code(), None), lost=False)
                files.remove()
            else:
                await self._recover_starting(attempt_id, row["job_id"], files)

    async def _recover_starting(self, attempt_id: str, job_id: str, files: TaskFiles) -> None:
        """An attempt the agent claimed but died before recording (or lost entirely)."""
        try:
            pid = int(files.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            pid = None
        if pid is not None and is_same_process_alive(pid, None):
            ticks = process_start_ticks(pid)
            async with self._db.transaction() as conn:
                if await conn.fetchval(SQL.mark_attempt_running, attempt_id, self.node_id, pid, ticks, None):
                    await self._announce_started(conn, attempt_id, job_id, pid)
            self._watch(attempt_id, files, wait_adopted(pid, ticks, files))
            return
        recorded = files.read_exit_code()
        if recorded is not None:
            await self.report_exit(attempt_id, Exit(recorded, None), lost=False)
        else:
            reason = "the node agent restarted and the task's process was gone"
            await self.report_exit(attempt_id, Exit(None, None, reason), lost=True)
        files.remove()
