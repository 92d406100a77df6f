"""Where a node keeps its tasks' logs, and answering for them on ``corral.logs.<node>``.

One file per attempt, ``<log dir>/<job>/<role>-<index>/attempt-<n>.log``: the node
agent sends its task's output there, the Kubernetes runner a pod's log. The API asks the
node that ran a task for a piece of it (``shared/node_logs.py``); ``LogServer`` answers,
in the agent for its node and in the launcher for each pod node it holds.

What may be read is decided here, never by the asker: the path is built from the log dir
and the attempt's job id, role, index and attempt number, each checked to be a plain
name (letters, digits, ``-``, ``_``: no ``/``, no ``.``, so no ``..``), and the file
must resolve inside the log dir and be a regular file. Anything else is refused, with
the reason, and nothing is read.

Concurrency: the bus calls ``answer`` once per request, one request of a subject at a
time; the read itself (at most ``CHUNK_BYTES``) runs in a thread. ``answer`` never
raises: a request it cannot serve gets an answer saying why, not a timeout.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import stat
from collections.abc import Callable, Collection
from pathlib import Path

from pydantic import ValidationError

from shared.bus.nats import NatsBus
from shared.node_logs import LOGS_QUEUE, LogChunk, LogRequest, logs_subject

log = logging.getLogger(__name__)

# A job id or a task role as the log dir's layout uses it. Job ids are ``job-<ulid>``
# and roles lower-case names (shared/jobs.NAME_PATTERN); this is wider, never a path.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,127}")
LOG_NAME = re.compile(r"attempt-([1-9][0-9]{0,8})\.log")
TASK_DIR = re.compile(r"(.+)-(0|[1-9][0-9]{0,8})")


class RefusedLogRequest(ValueError):
    """A request naming something that is not an attempt's log of this node's layout."""


def is_plain_name(name: str) -> bool:
    """A job id or task role as a directory name may be (no ``/``, no ``.``)."""
    return _NAME.fullmatch(name) is not None


def attempt_log_path(log_dir: Path, job_id: str, task_role: str, task_index: int, attempt_no: int) -> Path:
    """The attempt's log file under ``log_dir``; ``RefusedLogRequest`` for a job id or role
    that is not a plain name, or numbers out of range."""
    for what, name in (("job id", job_id), ("task role", task_role)):
        if not is_plain_name(name):
            raise RefusedLogRequest(
                f"refused: the {what} {name!r} is not a name (letters, digits, '-' and '_' only)"
            )
    if task_index < 0 or attempt_no < 1:
        raise RefusedLogRequest(f"refused: no task index {task_index} or attempt number {attempt_no}")
    return log_dir / job_id / f"{task_role}-{task_index}" / f"attempt-{attempt_no}.log"


def read_chunk(log_dir: Path, path: Path, offset: int, max_bytes: int) -> LogChunk:
    """Up to ``max_bytes`` of ``path`` from ``offset``, which must lie inside ``log_dir``
    once resolved (a link out of it is refused) and be a regular file."""
    try:
        resolved = path.resolve(strict=True)
    except FileNotFoundError:
        return LogChunk(exists=False)
    if not resolved.is_relative_to(log_dir.resolve()):
        raise RefusedLogRequest(f"refused: {path.name} leads outside this node's log dir")
    fd = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # (a FIFO: no wait)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RefusedLogRequest(f"refused: {path.name} is not a regular file")
        data = os.pread(fd, max_bytes, offset) if max_bytes else b""
    finally:
        os.close(fd)
    return LogChunk(exists=True, size=info.st_size, data=data)


class LogServer:
    """Answers log requests from one log dir (see the module doc)."""

    def __init__(self, log_dir: Path, retention_hours: float = 0.0) -> None:
        self._log_dir = log_dir
        self._retention_hours = retention_hours

    async def answer(self, question: bytes) -> bytes:
        return (await self.read(question)).model_dump_json().encode()

    async def read(self, question: bytes) -> LogChunk:
        try:
            request = LogRequest.model_validate_json(question)
        except ValidationError as exc:
            return LogChunk(error=f"refused: not a log request ({exc.error_count()} problems)")
        try:
            path = attempt_log_path(
                self._log_dir, request.job_id, request.task_role, request.task_index, request.attempt_no
            )
            chunk = await asyncio.to_thread(
                read_chunk, self._log_dir, path, request.offset, request.max_bytes
            )
        except RefusedLogRequest as exc:
            log.warning("log request for attempt %s refused: %s", request.attempt_id, exc)
            return LogChunk(error=str(exc))
        except OSError as exc:
            log.warning("could not read the log of attempt %s: %s", request.attempt_id, exc)
            return LogChunk(error=f"the node could not read this log: {exc.strerror or exc}")
        return chunk.model_copy(update={"retention_hours": self._retention_hours})


async def answer_for_nodes(
    bus: NatsBus, server: LogServer, nodes: Callable[[], Collection[str]], check_every_s: float
) -> None:
    """Answer on ``corral.logs.<node>`` for every node ``nodes()`` holds, from the first
    check after it appears on (the Kubernetes runner's nodes: it takes their leases as
    the monitor registers them); runs until cancelled. One subscription per node, not
    one on ``corral.logs.*``: a request for a node nobody answers for then fails at once
    (no responders) instead of waiting out its timeout."""
    answering: set[str] = set()
    async with asyncio.TaskGroup() as tg:
        while True:
            for node_id in sorted(set(nodes()) - answering):
                subject = logs_subject(node_id)
                tg.create_task(bus.answer(subject, LOGS_QUEUE, server.answer), name=f"logs-{node_id}")
                answering.add(node_id)
            await asyncio.sleep(check_every_s)
