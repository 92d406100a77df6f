"""A node's task logs are deleted once their attempt has been over for longer than the
node's retention (``CORRAL_AGENT_LOG_RETENTION_HOURS``; 0 keeps them for ever).

The node's disk holds the only copy of its tasks' logs (the API asks the node for them:
``task_logs.py``), so without a limit they grow with every job the node ever ran. Each
sweep lists the log files of the log dir's layout (``<job>/<role>-<index>/attempt-<n>.log``),
asks Postgres in one query per batch which of their attempts ended (EXITED or LOST)
longer ago than the retention, and deletes those files, with their companions (a name
that continues theirs after a dot: the Kubernetes runner's ``.cursor``). Never a live
attempt's log, whose state says it is live, nor a file whose attempt Postgres does not
know (not this cluster's to judge), nor anything outside the layout.

A job's directories go once they are empty and the job itself is over: a job that may
still run again (retried, requeued) could be making them for its next attempt at that
very moment, and an empty directory costs nothing.

Concurrency: ``sweep`` is the body of one periodic root task; the walking and deleting
run in a thread. A file that cannot be deleted is logged and tried again next sweep.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.launcher import repository
from services.launcher.task_logs import LOG_NAME, TASK_DIR, attempt_log_path, is_plain_name
from shared.db.pool import Database

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 600.0
BATCH = 1000  # files asked about in one query


@dataclass(frozen=True)
class LogFile:
    path: Path
    job_id: str
    task_role: str
    task_index: int
    attempt_no: int


def find_log_files(log_dir: Path) -> list[LogFile]:
    """Every attempt's log under ``log_dir`` in the node's layout (links not followed)."""
    found: list[LogFile] = []
    for job in _subdirectories(log_dir):
        if not is_plain_name(job.name):
            continue
        for task in _subdirectories(job):
            match = TASK_DIR.fullmatch(task.name)
            if match is None or not is_plain_name(match[1]):
                continue
            try:
                names = [p.name for p in task.iterdir()]
            except OSError:  # removed meanwhile
                continue
            for name in names:
                numbered = LOG_NAME.fullmatch(name)
                if numbered is None:
                    continue
                role, index, attempt_no = match[1], int(match[2]), int(numbered[1])
                path = attempt_log_path(log_dir, job.name, role, index, attempt_no)
                found.append(LogFile(path, job.name, role, index, attempt_no))
    return found


def _subdirectories(directory: Path) -> list[Path]:
    try:
        return [p for p in directory.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:  # not there (yet), or removed meanwhile
        return []


def remove(expired: Iterable[tuple[LogFile, bool]]) -> int:
    """Delete each file and its companions; then its directories where empty and
    ``job_ended`` (the second of each pair). How many logs were deleted."""
    removed = 0
    ended_dirs: set[Path] = set()
    for file, job_ended in expired:
        try:
            companions = [p for p in file.path.parent.iterdir() if p.name.startswith(file.path.name + ".")]
            for path in (file.path, *companions):
                path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("could not delete the log %s (%s); trying again next sweep", file.path, exc)
            continue
        removed += 1
        if job_ended:
            ended_dirs.add(file.path.parent)
    for task_dir in ended_dirs:
        for directory in (task_dir, task_dir.parent):
            try:
                directory.rmdir()
            except OSError:  # not empty (another task's logs, a live one's), or gone
                break
    return removed


# Which of these files' attempts ended long enough ago (job ids, roles, task indexes,
# attempt numbers, seconds): ``expired_task_logs``'s rows.
ExpiredLogs = Callable[[list[str], list[str], list[int], list[int], float], Awaitable[list[Any]]]


class LogRetention:
    """Deletes the logs of ``log_dir`` past ``retention_hours`` (see the module doc).

    ``expired``: how to ask; a node agent, whose role may read no table, asks its node's
    function (``agent/repository.py``). By default the launcher's own query."""

    def __init__(
        self, db: Database, log_dir: Path, retention_hours: float, *, expired: ExpiredLogs | None = None
    ) -> None:
        self._db = db
        self._expired = expired or self._expired_by_query
        self._log_dir = log_dir
        self._retention_s = retention_hours * 3600.0
        self._hours = retention_hours

    async def sweep(self) -> int:
        """One sweep; how many logs it deleted."""
        if self._retention_s <= 0:
            return 0
        files = await asyncio.to_thread(find_log_files, self._log_dir)
        expired: list[tuple[LogFile, bool]] = []
        for start in range(0, len(files), BATCH):
            batch = files[start : start + BATCH]
            rows = await self._expired(
                [f.job_id for f in batch],
                [f.task_role for f in batch],
                [f.task_index for f in batch],
                [f.attempt_no for f in batch],
                self._retention_s,
            )
            expired += [(batch[row["ord"] - 1], bool(row["job_ended"])) for row in rows]
        removed = await asyncio.to_thread(remove, expired) if expired else 0
        if removed:
            log.info("deleted %d task log(s) older than this node's %g-hour retention", removed, self._hours)
        return removed

    async def _expired_by_query(
        self,
        job_ids: list[str],
        roles: list[str],
        indexes: list[int],
        attempt_nos: list[int],
        older_than_s: float,
    ) -> list[Any]:
        return await repository.expired_task_logs(
            self._db, job_ids, roles, indexes, attempt_nos, older_than_s
        )
