"""What the interactive routes take and answer."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from services.api.interactive.repository import SessionRow
from shared.request_types import Integer

LABEL_PATTERN = r"^[A-Za-z][A-Za-z0-9_]{0,31}$"  # a port label, as shared/jobs.py allows
TASK_PATTERN = r"^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?-[0-9]{1,6}$"
# Bounded so that the largest command, however escaped in JSON, stays within the API's
# body limit (CORRAL_API_MAX_BODY_BYTES, 1 MiB by default).
Argument = Annotated[str, Field(max_length=2048, pattern=r"^[^\x00]*$")]


class SessionSpec(BaseModel):
    """``POST /api/v1/jobs/{job_id}/sessions``."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {"kind": "exec", "task": "worker-1", "command": ["nvidia-smi"], "tty": False},
                {"kind": "port-forward", "task": "main-0", "port": "http"},
            ]
        },
    )

    kind: Literal["exec", "port-forward"]
    task: str | None = Field(
        default=None,
        pattern=TASK_PATTERN,
        description="<role>-<index>, e.g. worker-1 (default: the first task of the first role)",
    )
    command: list[Argument] = Field(
        default_factory=list,
        max_length=64,
        description="exec: the command and its arguments; [] an interactive shell (bash, else sh)",
    )
    tty: bool = Field(default=True, description="exec: on a terminal (stderr then comes on stdout)")
    stdin: bool = Field(default=True, description="exec: whether the client sends input")
    cols: Integer = Field(default=80, ge=1, le=10_000, description="exec: the terminal's width")
    rows: Integer = Field(default=24, ge=1, le=10_000, description="exec: the terminal's height")
    port: str | None = Field(
        default=None, pattern=LABEL_PATTERN, description="port-forward: the label of the task's port"
    )


class SessionCreated(BaseModel):
    id: str
    kind: str
    job_id: str
    task: str
    node_id: str
    stream_url: str = Field(
        description="open it as a WebSocket (subprotocol v4.channel.k8s.io) with the same credential,"
        " once, before expires_at"
    )
    expires_at: datetime


class SessionRecord(BaseModel):
    """One session in the audit: who went into which task, when, for how long, with what end."""

    id: str
    kind: str
    job_id: str
    task: str
    attempt_id: str
    node_id: str
    user: str
    token_id: str = Field(description="the token it was opened with, or 'portal' for a portal sign-in")
    command: list[str]
    port: str = Field(description="port-forward and proxy: the port's label")
    created_at: datetime
    connected_at: datetime | None
    closed_at: datetime | None
    duration_s: float | None = Field(description="from connecting to closing")
    close_reason: str | None
    exit_code: int | None
    bytes_in: int = Field(description="bytes from the client to the task")
    bytes_out: int = Field(description="bytes from the task to the client")

    @classmethod
    def from_row(cls, row: SessionRow) -> SessionRecord:
        duration = (
            (row.closed_at - row.connected_at).total_seconds()
            if row.closed_at is not None and row.connected_at is not None
            else None
        )
        return cls(
            id=row.id,
            kind=row.kind,
            job_id=row.job_id,
            task=f"{row.task_role}-{row.task_index}",
            attempt_id=row.attempt_id,
            node_id=row.node_id,
            user=row.username,
            token_id=row.token_id,
            command=row.command,
            port=row.port_label,
            created_at=row.created_at,
            connected_at=row.connected_at,
            closed_at=row.closed_at,
            duration_s=duration,
            close_reason=row.close_reason,
            exit_code=row.exit_code,
            bytes_in=row.bytes_in,
            bytes_out=row.bytes_out,
        )


class SessionList(BaseModel):
    items: list[SessionRecord]
