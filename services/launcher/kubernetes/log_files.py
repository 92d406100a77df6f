"""A pod's timestamped log, spliced into its attempt's log file exactly once.

The runner asks the API server for a pod's log with ``timestamps=true``: every line
comes as ``<RFC 3339 time> <text>``. The attempt's file (the node agent's layout, which
the API serves) gets the text alone. Beside it, ``<file>.cursor`` says how far the file
goes in the pod's log, so a follower that starts again — after a dropped stream, a
write error, a launcher restart — asks for the log from that point and writes neither a
line twice nor leaves one out:

- ``size``: the bytes of the file the cursor accounts for. The file is written first,
  the cursor after (atomically, by rename), so a crash between the two leaves the file
  longer than the cursor says: those bytes are cut before the next write and come again
  from the kubelet.
- ``time``, ``lines``, ``part``: the timestamp of the last line written (in whole or in
  part), how many whole lines with exactly that timestamp are in the file, and how many
  bytes of the next one (a line still being written when the stream broke). The API
  server honours ``sinceTime`` to the second only, so a resumed stream starts at
  ``time`` rounded down and ``Splicer`` drops what the file already has: older lines,
  the first ``lines`` lines stamped ``time``, the first ``part`` bytes of the next.
  Comparing timestamps as integers of nanoseconds keeps two lines a microsecond apart
  apart; counting lines keeps two lines with the very same timestamp apart.
- ``done``: the pod ended and the file holds its whole log.

Memory: a line's text is written as it comes, never gathered, so a line without end
costs no more than a short one; only a line's timestamp (a few dozen bytes) is held.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")
# Longer than any RFC 3339 timestamp: a line start without one is taken as text.
_MAX_STAMP = 40


def stamp_ns(text: str) -> int | None:
    """An RFC 3339 timestamp (the kubelet's: up to nanoseconds) as nanoseconds since
    the epoch; ``None`` if it is not one."""
    match = _STAMP.match(text)
    if match is None:
        return None
    whole, fraction, zone = match.groups()
    try:
        seconds = int(datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone)).timestamp())
    except ValueError:  # shaped like one, but no date (month 13)
        return None
    return seconds * 1_000_000_000 + int((fraction or "").ljust(9, "0"))


def whole_seconds(text: str) -> str:
    """``text`` rounded down to the second, in UTC: what ``sinceTime`` can say."""
    nanos = stamp_ns(text)
    if nanos is None:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    return datetime.fromtimestamp(nanos // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Cursor:
    size: int = 0
    time: str = ""
    lines: int = 0
    part: int = 0
    done: bool = False

    def since(self) -> str | None:
        return whole_seconds(self.time) if self.time else None


def cursor_path(log_path: Path) -> Path:
    return log_path.with_name(log_path.name + ".cursor")


def load_cursor(log_path: Path) -> Cursor:
    """The saved cursor; a new one (the log from its start) when there is none."""
    try:
        fields = json.loads(cursor_path(log_path).read_text())
        return Cursor(**fields)
    except FileNotFoundError:
        return Cursor()
    except (ValueError, TypeError):  # torn or foreign: start over, cutting the file
        return Cursor()


def save(log_path: Path, data: bytes, before: Cursor, after: Cursor) -> None:
    """Append ``data`` where ``before`` says the file ends, then record ``after``.

    Blocking: called through ``asyncio.to_thread``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as handle:
        if handle.tell() > before.size:  # written after the last cursor: it comes again
            handle.truncate(before.size)
            handle.seek(before.size)
        handle.write(data)
    target = cursor_path(log_path)
    temporary = target.with_name(target.name + ".tmp")
    temporary.write_text(json.dumps(asdict(after)))
    os.replace(temporary, target)


def remove_cursor(log_path: Path) -> None:
    cursor_path(log_path).unlink(missing_ok=True)


class Splicer:
    """Turns a timestamped log stream, read from ``cursor.since()``, into the bytes to
    append, keeping ``cursor`` (less its ``size``, which the writer keeps) in step."""

    def __init__(self, cursor: Cursor) -> None:
        self.cursor = cursor
        self._resume = stamp_ns(cursor.time) if cursor.time else None
        self._seen = 0  # lines stamped exactly cursor.time met while resuming
        self._head = bytearray()  # the timestamp of the line begun, until its space
        self._in_line = False
        self._writing = False  # this line is new to the file (else: dropped)
        self._skip = 0  # bytes of this line the file already has
        self.unstamped = 0  # lines that came without a timestamp (written, not placed)

    def feed(self, chunk: bytes) -> bytes:
        out = bytearray()
        at = 0
        while at < len(chunk):
            if not self._in_line:
                at = self._read_head(chunk, at, out)
                continue
            end = chunk.find(b"\n", at)
            stop = len(chunk) if end < 0 else end + 1
            piece = chunk[at:stop]
            at = stop
            if self._writing:
                dropped = min(self._skip, len(piece))
                self._skip -= dropped
                out += piece[dropped:]
                self.cursor = replace(self.cursor, part=self.cursor.part + len(piece) - dropped)
            if end >= 0:
                if self._writing:
                    self.cursor = replace(self.cursor, lines=self.cursor.lines + 1, part=0)
                self._in_line = False
        return bytes(out)

    def _read_head(self, chunk: bytes, at: int, out: bytearray) -> int:
        """Read a line's timestamp (perhaps across chunks); the position after it."""
        ends = [i for i in (chunk.find(b" ", at), chunk.find(b"\n", at)) if i >= 0]
        stop = min(ends) if ends else len(chunk)
        if len(self._head) + stop - at > _MAX_STAMP:
            return self._unstamped(chunk, at, stop, out)
        if not ends:
            self._head += chunk[at:]  # the timestamp goes on in the next chunk
            return len(chunk)
        stamp = (bytes(self._head) + chunk[at:stop]).decode("ascii", errors="replace")
        if chunk[stop : stop + 1] != b" " or stamp_ns(stamp) is None:
            return self._unstamped(chunk, at, stop, out)
        self._head.clear()
        self._start_line(stamp)
        return stop + 1

    def _unstamped(self, chunk: bytes, at: int, stop: int, out: bytearray) -> int:
        """No timestamp where one should be: keep the text rather than lose it. (Such a
        line cannot be placed on resuming; the kubelet always stamps its lines.)"""
        text = bytes(self._head) + chunk[at:stop]
        self._head.clear()
        self.unstamped += 1
        self._in_line, self._writing, self._skip, self._resume = True, True, 0, None
        out += text
        self.cursor = replace(self.cursor, part=self.cursor.part + len(text))
        return stop

    def _start_line(self, stamp: str) -> None:
        self._in_line, self._writing, self._skip = True, True, 0
        key = stamp_ns(stamp)
        if self._resume is not None and key is not None:
            if key < self._resume:
                self._writing = False
                return
            if key == self._resume:
                if self._seen < self.cursor.lines:
                    self._seen += 1
                    self._writing = False
                    return
                self._skip = self.cursor.part  # the line the file ends within
                self._resume = None
                return
        self._resume = None  # past what the file has: from here on, everything is new
        if stamp != self.cursor.time:
            self.cursor = replace(self.cursor, time=stamp, lines=0, part=0)
