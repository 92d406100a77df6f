"""A task's log, asked of the node that ran it: core NATS request/reply on
``corral.logs.<node>``, as the Kubernetes API server asks a kubelet for a container's log.

The API asks (``services/api/jobs/logs.py``); the node's agent answers from its own log dir,
and for the nodes the launcher runs through Kubernetes, the launcher does, with the same
code (``services/launcher/task_logs.py``). So the API needs no shared filesystem and an
agent no inbound port: it subscribes to its own node's subject only, and the API
publishes to ``corral.logs.*``.

A request names the attempt and a byte range; the answer carries at most ``CHUNK_BYTES``
of the file (a NATS message is limited to 1 MiB by default, and the bytes travel in
base64), whether the file exists, and its size then, so the asker knows how far there is
to go. The request never carries a path: the node works it out from its own log dir and
the attempt's job, task and attempt number, and refuses names that are not ones.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

LOGS_SUBJECT_PREFIX = "corral.logs"
# One queue group: a node's old and new agent, both briefly connected, answer once.
LOGS_QUEUE = "node-logs"
CHUNK_BYTES = 64 * 1024


def logs_subject(node_id: str) -> str:
    """Where ``node_id``'s agent (or the launcher, for a pod node) answers for its logs."""
    if not node_id or any(c in node_id for c in ".*> \t\r\n"):
        raise ValueError(f"{node_id!r} is not a node id (no dots, wildcards or spaces)")
    return f"{LOGS_SUBJECT_PREFIX}.{node_id}"


class LogRequest(BaseModel):
    """Up to ``max_bytes`` of one attempt's log from ``offset`` (``max_bytes=0``: only
    whether it exists and its size)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attempt_id: str = Field(max_length=64)
    job_id: str = Field(max_length=128)
    task_role: str = Field(max_length=128)
    task_index: int = Field(ge=0)
    attempt_no: int = Field(ge=1)
    offset: int = Field(default=0, ge=0)
    max_bytes: int = Field(default=CHUNK_BYTES, ge=0, le=CHUNK_BYTES)


class LogChunk(BaseModel):
    """The node's answer. ``error`` set: the request was refused or the file unreadable,
    and nothing else is meaningful."""

    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

    exists: bool = False
    size: int = Field(default=0, description="the file's size when it was read")
    data: bytes = b""
    # How long the node keeps an ended attempt's log (CORRAL_AGENT_LOG_RETENTION_HOURS;
    # 0: for ever), so a missing one can be explained.
    retention_hours: float = 0.0
    error: str | None = None
