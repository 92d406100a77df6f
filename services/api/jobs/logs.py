"""A task's log, asked of the node that ran it (``GET .../logs``, with ``follow=true``).

Each node keeps its tasks' logs on its own disk; the API asks the node for a piece at a
time over core NATS request/reply (``shared/node_logs.py``), as the Kubernetes API server
asks a kubelet: the node's agent answers (the launcher, for the nodes it runs through
Kubernetes), so no filesystem is shared and no node opens a port. A piece is at most
``CHUNK_BYTES``; a read of the whole tail takes one request per piece.

Following means: send what is there, then ask again from the new offset, polling, and
stop once the attempt has ended *and* the log has been read to its end — checking the
end state before the last read, so the last lines a task writes just before exiting are
never lost.

A node that does not answer (nobody subscribed, or no answer within the timeout) is a
503 saying since when it has been silent and that its logs come back when it does;
while following, the stream waits that long again for it, then ends with a line saying
so, rather than hanging on a node that may never come back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

from pydantic import ValidationError

from services.api.jobs.repository import JobRepository, LogAttempt, NodeLease
from shared.errors import CorralError, NotFound, TransientError
from shared.node_logs import CHUNK_BYTES, LogChunk, LogRequest, logs_subject

POLL_S = 0.2
LIVE_STATES = ("ASSIGNED", "STARTING", "RUNNING")

# Sends a request to a subject and returns the answer; ``TimeoutError`` when none comes.
AskNode = Callable[[str, bytes], Awaitable[bytes]]


class NodeNotAnswering(TransientError):
    problem_type = "node-not-answering"
    title = "Node not answering"


class NodeRefused(CorralError):
    """The node answered, but not with the log: it refused the request or could not
    read the file. Nothing the caller can fix; the node's log says more."""

    problem_type = "node-refused"
    status = 502
    title = "The node did not serve the log"


class AttemptLog:
    """One attempt's log, read from its node."""

    def __init__(self, ask: AskNode, repo: JobRepository, attempt: LogAttempt, patience_s: float) -> None:
        self._ask = ask
        self._repo = repo
        self._attempt = attempt
        self._node = attempt.node_id
        self._patience_s = patience_s

    async def read(self, offset: int, max_bytes: int = CHUNK_BYTES) -> LogChunk:
        """Up to ``max_bytes`` from ``offset``, with whether the file exists and its size."""
        a = self._attempt
        question = LogRequest(
            attempt_id=a.id,
            job_id=a.job_id,
            task_role=a.task_role,
            task_index=a.task_index,
            attempt_no=a.attempt_no,
            offset=offset,
            max_bytes=max_bytes,
        )
        try:
            answer = await self._ask(logs_subject(self._node), question.model_dump_json().encode())
        except TimeoutError:
            raise await self._not_answering() from None
        try:
            chunk = LogChunk.model_validate_json(answer)
        except ValidationError:
            raise NodeRefused(f"node {self._node} answered with something that is not a log") from None
        if chunk.error is not None:
            raise NodeRefused(f"node {self._node} did not serve this log: {chunk.error}")
        return chunk

    async def tail(self, limit: int) -> bytes:
        """The last ``limit`` bytes the log held when asked (404 if it is gone)."""
        first = await self.read(0)
        if not first.exists:
            raise self._missing(first)
        end = first.size
        if end <= limit:
            out, offset = bytearray(first.data), len(first.data)
        else:
            out, offset = bytearray(), end - limit
        while offset < end:  # what it held when first asked; it may grow meanwhile
            chunk = await self.read(offset, min(CHUNK_BYTES, end - offset))
            if not chunk.data:
                break  # cut short meanwhile
            out += chunk.data
            offset += len(chunk.data)
        return bytes(out)

    async def check_followable(self) -> None:
        """Raise now what a follower would meet first (the node silent, the log of an
        ended attempt gone), while the answer can still be a problem, not a stream."""
        head = await self.read(0, 0)
        if not head.exists and self._attempt.state not in LIVE_STATES:
            raise self._missing(head)

    async def follow(self) -> AsyncIterator[bytes]:
        offset = 0
        silent_since: float | None = None
        while True:
            ended = await self._repo.attempt_state(self._attempt.id) not in LIVE_STATES
            try:
                chunk = await self.read(offset)
                while chunk.data:
                    offset += len(chunk.data)
                    yield chunk.data
                    chunk = await self.read(offset)
            except NodeNotAnswering as exc:
                # A node restarting answers again within moments; one that is gone never.
                silent_since = silent_since if silent_since is not None else time.monotonic()
                if time.monotonic() - silent_since >= self._patience_s:
                    yield f"\n[corral] {exc.detail}\n".encode()
                    return
            except NodeRefused as exc:
                yield f"\n[corral] {exc.detail}\n".encode()
                return
            else:
                silent_since = None
                if ended:
                    return
            await asyncio.sleep(POLL_S)

    def _missing(self, chunk: LogChunk) -> NotFound:
        a = self._attempt
        finished = a.finished_at
        hours = chunk.retention_hours
        if hours > 0 and finished is not None and datetime.now(UTC) - finished >= timedelta(hours=hours):
            return NotFound(
                f"the log of attempt {a.attempt_no} of task {a.task_role}-{a.task_index} was "
                f"removed from node {self._node}, which keeps the logs of ended attempts for "
                f"{hours:g} hours (CORRAL_AGENT_LOG_RETENTION_HOURS); it ended {_at(finished)}"
            )
        return NotFound(
            f"the log file of this attempt is gone from node {self._node} (attempt-{a.attempt_no}.log)"
        )

    async def _not_answering(self) -> NodeNotAnswering:
        heard = await self._repo.node_lease(self._node)
        return NodeNotAnswering(not_answering(self._node, heard))


def not_answering(node_id: str, heard: NodeLease | None) -> str:
    """Why a node's log cannot be had now, and since when: ``heard`` is its agent's lease,
    None if it never had one."""
    if heard is None:
        since = "no agent of it has ever registered"
    elif heard.lost_at is not None:
        since = (
            f"it has been silent since its lease ran out {_at(heard.lease_expires_at)} "
            f"and was declared lost {_at(heard.lost_at)}"
        )
    elif heard.lease_expires_at <= datetime.now(UTC):
        since = f"it has been silent since its lease ran out {_at(heard.lease_expires_at)}"
    else:
        since = (
            f"its agent renewed its lease lately (held until {_stamp(heard.lease_expires_at)}) "
            "but does not answer: stopped or restarting"
        )
    return (
        f"node {node_id} is not answering: {since}. This task's log is kept on that node "
        "and comes back when the node does; try again then"
    )


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _at(moment: datetime) -> str:
    """``at 2025-01-31 12:00:00 UTC (5 min ago)``."""
    ago = max(0, int((datetime.now(UTC) - moment).total_seconds()))
    when = _stamp(moment)
    if ago < 120:
        return f"at {when} ({ago} s ago)"
    if ago < 7200:
        return f"at {when} ({ago // 60} min ago)"
    if ago < 172800:
        return f"at {when} ({ago // 3600} h ago)"
    return f"at {when} ({ago // 86400} days ago)"
