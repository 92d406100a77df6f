"""The frames, subjects and messages of an interactive stream between the API and a node.

A person's exec or port-forward reaches a task as the Kubernetes API server reaches a
kubelet, except that the node opens no port: the API asks the node on its own subject
(``corral.interactive.<node>.open``, core NATS request/reply, answered by the node's
agent, or by the launcher for a node it runs through Kubernetes), then the two ends
exchange frames on two subjects named by the stream (``…in.<stream>`` towards the node,
``…out.<stream>`` back). A node subscribes only to its own node's subjects, so no node
can read another's keystrokes or answer for another's tasks.

Every frame is ``seq (4 bytes, big-endian) | channel (1 byte) | data``. Channels 0-4 are
the ones of Kubernetes' ``v4.channel.k8s.io`` (stdin, stdout, stderr, status, resize),
so the API passes a client's WebSocket frames through unchanged, and the Kubernetes
driver passes a pod's ``pods/exec`` frames through unchanged. Channels from 0x10 up are
the stream's own (credit, close, end of input, ping); ``stream.StreamEnd`` handles them.
Port-forward uses channel 0 for data both ways and channel 1 for errors, as Kubernetes'
port-forward does.
"""

from __future__ import annotations

import json
import re
import struct
from enum import IntEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Channel(IntEnum):
    STDIN = 0
    STDOUT = 1
    STDERR = 2
    STATUS = 3
    RESIZE = 4
    CREDIT = 0x10
    CLOSE = 0x11
    EOF = 0x12
    PING = 0x13


DATA = Channel.STDIN  # port-forward's data channel, both ways
ERROR = Channel.STDOUT  # port-forward's error channel, node to client
KUBERNETES_CHANNELS = frozenset(
    {Channel.STDIN, Channel.STDOUT, Channel.STDERR, Channel.STATUS, Channel.RESIZE}
)
KUBERNETES_SUBPROTOCOL = "v4.channel.k8s.io"
# v5 adds one message, channel 255 "this channel is closed" (the end of stdin); the
# framing is otherwise v4's. A server takes the newest one the client offers.
KUBERNETES_SUBPROTOCOLS = ("v5.channel.k8s.io", KUBERNETES_SUBPROTOCOL)
# Data bytes per frame: well under NATS's 1 MiB default payload limit, large enough that
# a bulk transfer costs few messages.
MAX_DATA = 64 * 1024
_HEADER = struct.Struct(">IB")
HEADER_BYTES = _HEADER.size

SUBJECT_PREFIX = "corral.interactive"
# One queue group: a node's old and new agent, both briefly connected, answer once.
INTERACTIVE_QUEUE = "node-interactive"
STREAM_ID = re.compile(r"[0-9a-f]{32}")


class MalformedFrame(ValueError):
    """A frame that does not follow the framing; the stream it came on is closed."""


def encode(seq: int, channel: int, data: bytes = b"") -> bytes:
    return _HEADER.pack(seq & 0xFFFFFFFF, channel) + data


def decode(raw: bytes) -> tuple[int, int, bytes]:
    """``(seq, channel, data)`` of one frame."""
    if len(raw) < HEADER_BYTES:
        raise MalformedFrame(f"a frame of {len(raw)} bytes is shorter than its {HEADER_BYTES}-byte header")
    seq, channel = _HEADER.unpack_from(raw)
    if channel not in Channel._value2member_map_:
        raise MalformedFrame(f"unknown channel {channel}")
    return seq, channel, raw[HEADER_BYTES:]


def _node(node_id: str) -> str:
    if not node_id or any(c in node_id for c in ".*> \t\r\n"):
        raise ValueError(f"{node_id!r} is not a node id (no dots, wildcards or spaces)")
    return node_id


def _stream(stream_id: str) -> str:
    if STREAM_ID.fullmatch(stream_id) is None:
        raise ValueError(f"{stream_id!r} is not a stream id (32 lowercase hex digits)")
    return stream_id


def open_subject(node_id: str) -> str:
    """Where ``node_id``'s agent (or the launcher, for a pod node) answers open requests."""
    return f"{SUBJECT_PREFIX}.{_node(node_id)}.open"


def to_node_subject(node_id: str, stream_id: str) -> str:
    """The frames of one stream towards the node (stdin, resize, a forward's data)."""
    return f"{SUBJECT_PREFIX}.{_node(node_id)}.in.{_stream(stream_id)}"


def from_node_subject(node_id: str, stream_id: str) -> str:
    """The frames of one stream from the node (output, status, a forward's data)."""
    return f"{SUBJECT_PREFIX}.{_node(node_id)}.out.{_stream(stream_id)}"


class OpenRequest(BaseModel):
    """What the API asks a node to open. The node checks it against its own attempts:
    the attempt must be running there, as the job, role and index say."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stream_id: str = Field(pattern=STREAM_ID.pattern)
    kind: Literal["exec", "forward"]
    attempt_id: str = Field(max_length=64)
    job_id: str = Field(max_length=128)
    task_role: str = Field(max_length=128)
    task_index: int = Field(ge=0)
    user: str = Field(max_length=256, description="who opened it, for the node's log")
    command: list[str] = Field(default_factory=list, max_length=256)
    tty: bool = True
    stdin: bool = True
    cols: int = Field(default=80, ge=1, le=10_000)
    rows: int = Field(default=24, ge=1, le=10_000)
    port: int = Field(default=0, ge=0, le=65_535)
    port_label: str = Field(default="", max_length=64)
    idle_timeout_s: float = Field(default=1800.0, gt=0)


class OpenAnswer(BaseModel):
    """The node's answer. Not ``ok``: ``error`` is said to the user as it is."""

    ok: bool
    reason: Literal["not_running", "no_such_port", "refused", "failed"] | None = None
    error: str | None = None


def exit_status(exit_code: int | None, *, signal: int | None = None, message: str = "") -> bytes:
    """The Kubernetes ``metav1.Status`` an exec ends with: ``Success``, or ``Failure``
    with the exit code as ``NonZeroExitCode``'s cause (what kubectl reads)."""
    if exit_code == 0 and signal is None:
        status: dict[str, object] = {"metadata": {}, "status": "Success"}
    else:
        code = exit_code if exit_code is not None else 128 + (signal or 0)
        said = message or (
            f"command terminated by signal {signal}"
            if signal
            else f"command terminated with non-zero exit code: {code}"
        )
        status = {
            "metadata": {},
            "status": "Failure",
            "message": said,
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
        }
    return json.dumps(status).encode()


def exit_code_of(status: bytes) -> int | None:
    """The exit code a Status says: 0 for ``Success``; None when it names none."""
    try:
        parsed = json.loads(status)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(parsed, dict):
        return None
    if parsed.get("status") == "Success":
        return 0
    causes = (parsed.get("details") or {}).get("causes") or []
    for cause in causes:
        if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message", ""))
            except ValueError:
                return None
    return None


def resize_payload(cols: int, rows: int) -> bytes:
    return json.dumps({"Width": cols, "Height": rows}).encode()


def parse_resize(data: bytes) -> tuple[int, int]:
    """``(cols, rows)`` of a resize frame."""
    try:
        parsed = json.loads(data)
        cols, rows = int(parsed["Width"]), int(parsed["Height"])
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
        raise MalformedFrame('a resize frame must be JSON {"Width": columns, "Height": rows}') from exc
    if not (0 < cols <= 10_000 and 0 < rows <= 10_000):
        raise MalformedFrame(f"a terminal of {cols}x{rows} is out of range (1 to 10000 each)")
    return cols, rows
