"""The framing of an interactive session's WebSocket: Kubernetes' ``v4.channel.k8s.io``.

Every binary message is one channel byte and then data: 0 standard input, 1 standard
output, 2 standard error, 3 the final status (a Kubernetes ``metav1.Status`` as JSON), 4 a
terminal resize (``{"Width": columns, "Height": rows}``). A port-forward uses channel 0 for
its bytes both ways and channel 1 for error text from the server, as ``kubectl
port-forward`` does. These are Kubernetes' own numbers, so a client written for a
kubelet's exec speaks to Corral unchanged.

One message comes from the next version, ``v5.channel.k8s.io``: channel 255 with one byte
naming the channel that ended (``b"\\xff\\x00"``: standard input ended; for a
port-forward, the client's half of the connection). v4 has no way to say it, and ``echo
hi | corral exec JOB -T -- cat`` needs it for ``cat`` to finish.

The server's own copy of these numbers is ``shared/interactive/protocol.py``. They are
written here again, not imported, because the SDK ships on its own (an import-linter
contract keeps ``shared`` out of it); they are Kubernetes' and do not change.
"""

from __future__ import annotations

import json
from enum import IntEnum

SUBPROTOCOL = "v4.channel.k8s.io"
# Offered newest first: a server that speaks v5 takes it (the end of stdin is then v5's own
# message); Corral's API also takes that message on v4.
SUBPROTOCOLS = ("v5.channel.k8s.io", SUBPROTOCOL)


class Channel(IntEnum):
    STDIN = 0
    STDOUT = 1
    STDERR = 2
    STATUS = 3
    RESIZE = 4
    CLOSE = 255


DATA = Channel.STDIN  # port-forward's bytes, both ways
ERROR = Channel.STDOUT  # port-forward's error text, from the server
STDIN_ENDED = bytes([Channel.CLOSE, Channel.STDIN])


def frame(channel: int, data: bytes = b"") -> bytes:
    return bytes([channel]) + data


def resize_payload(cols: int, rows: int) -> bytes:
    return json.dumps({"Width": cols, "Height": rows}).encode()


def exit_code_of(status: bytes) -> int | None:
    """The exit code a Status says: 0 for ``Success``, the ``ExitCode`` cause of a
    ``NonZeroExitCode`` failure; ``None`` when it names none (the command never ran)."""
    try:
        parsed = json.loads(status)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(parsed, dict):
        return None
    if parsed.get("status") == "Success":
        return 0
    details = parsed.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    for cause in causes if isinstance(causes, list) else []:
        if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message", ""))
            except (TypeError, ValueError):
                return None
    return None


def status_message(status: bytes) -> str:
    """What a Status says in words (its ``message``), for a command that did not run."""
    try:
        parsed = json.loads(status)
    except (ValueError, UnicodeDecodeError):
        return status.decode(errors="replace")
    return str(parsed.get("message", "")) if isinstance(parsed, dict) else ""
