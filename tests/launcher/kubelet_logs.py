"""A container's log as the kubelet keeps and serves it, for the fake API server: lines
stamped with the time they were written, rendered with Go's ``RFC3339Nano`` timestamps."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime


def rfc3339_nano(nanos: int) -> str:
    """Go's ``time.RFC3339Nano`` in UTC: the fraction without its trailing zeros."""
    seconds, fraction = divmod(nanos, 1_000_000_000)
    whole = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{fraction:09d}".rstrip("0")
    return f"{whole}.{digits}Z" if digits else f"{whole}Z"


def parse_rfc3339(text: str) -> int:
    head, _, fraction = text.rstrip("Z").partition(".")
    seconds = int(datetime.fromisoformat(head + "+00:00").timestamp())
    return seconds * 1_000_000_000 + int(fraction.ljust(9, "0") or 0)


@dataclass
class LogLine:
    """One line of a container's log, as the kubelet keeps it: the time it was written,
    and its bytes (the last line may still lack its newline)."""

    nanos: int
    data: bytearray

    def render(self, timestamps: bool, start: int = 0) -> bytes:
        """From byte ``start`` of the line; the timestamp goes before its first byte."""
        prefix = f"{rfc3339_nano(self.nanos)} ".encode() if timestamps and start == 0 else b""
        return prefix + bytes(self.data[start:])
