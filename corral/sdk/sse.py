"""A parser for the text/event-stream format (the WHATWG HTML "server-sent events" rules
that matter to Corral's stream), fed one line at a time.

It is plain, synchronous and I/O-free so both clients share it: they read lines from the
response and hand each one here. A blank line ends a frame; a frame with ``data`` is an
event; ``:`` lines are comments (Corral's keep-alives); ``retry:`` changes how long to
wait before reconnecting; ``id:`` is the cursor to resume from.
"""

from __future__ import annotations

import json

from corral.sdk.models import Event


class SseParser:
    def __init__(self) -> None:
        self.retry_ms: int | None = None
        self._id = ""
        self._type = ""
        self._data: list[str] = []

    def feed(self, line: str) -> Event | None:
        """The event this line completes, if it completes one."""
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._type = value
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> Event | None:
        data, event_type, self._data, self._type = self._data, self._type, [], ""
        if not data:
            return None
        text = "\n".join(data)
        try:
            document = json.loads(text)
        except ValueError:
            document = {"data": text}
        if not isinstance(document, dict):
            document = {"data": document}
        return Event(id=self._id, type=event_type or str(document.get("type", "message")), document=document)


def reconnect_wait(configured: float | None, parser: SseParser) -> float:
    """Seconds before reconnecting: the caller's choice, else the server's ``retry:``, else 2."""
    if configured is not None:
        return configured
    return parser.retry_ms / 1000 if parser.retry_ms is not None else 2.0
