"""Splicing a pod's timestamped log into its attempt's file (services/launcher/kubernetes/
log_files.py): whatever point a stream breaks at, and however the bytes were chunked,
the stream resumed from the saved cursor completes the file with no line twice and
none left out — lines with the very same timestamp, lines a microsecond apart and a
line cut in the middle included."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from services.launcher.kubernetes.log_files import (
    Cursor,
    Splicer,
    cursor_path,
    load_cursor,
    save,
    stamp_ns,
    whole_seconds,
)
from tests.launcher.kubelet_logs import LogLine, rfc3339_nano

BASE = 1_700_000_000 * 1_000_000_000  # 2023-11-14T22:13:20Z
LINES = [
    LogLine(BASE + 0, bytearray(b"epoch 1\n")),
    LogLine(BASE + 0, bytearray(b"epoch 1 again, the same nanosecond\n")),
    LogLine(BASE + 1_000, bytearray(b"a microsecond later\n")),
    LogLine(BASE + 1_001, bytearray(b"and a nanosecond after that\n")),
    LogLine(BASE + 1_001, bytearray(b"\n")),  # an empty line
    LogLine(BASE + 2_000_000_000, bytearray(b"two seconds on: a longer line " + b"x" * 100 + b"\n")),
    LogLine(BASE + 2_000_000_000, bytearray(b"no newline at the very end")),
]
TEXT = b"".join(line.render(False) for line in LINES)


def stream(since: str | None) -> bytes:
    """What the kubelet sends with timestamps=true&sinceTime=since."""
    start = stamp_ns(since) if since else None
    return b"".join(line.render(True) for line in LINES if start is None or line.nanos >= start)


def test_timestamps_are_read_to_the_nanosecond_and_resumed_from_the_second() -> None:
    assert stamp_ns("2023-11-14T22:13:20Z") == BASE
    assert stamp_ns("2023-11-14T22:13:20.000001Z") == BASE + 1_000
    assert stamp_ns("2023-11-14T23:13:20.5+01:00") == BASE + 500_000_000
    assert stamp_ns("2023-13-14T22:13:20Z") is None
    assert stamp_ns("yesterday") is None
    assert rfc3339_nano(BASE + 1_000) == "2023-11-14T22:13:20.000001Z"
    assert whole_seconds("2023-11-14T23:13:21.999999999+01:00") == "2023-11-14T22:13:21Z"


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_a_stream_in_any_chunks_becomes_the_text_alone(chunk: int) -> None:
    splicer = Splicer(Cursor())
    data = stream(None)
    out = b"".join(splicer.feed(data[i : i + chunk]) for i in range(0, len(data), chunk))
    assert out == TEXT
    assert splicer.cursor.time == rfc3339_nano(LINES[-1].nanos)
    assert (splicer.cursor.lines, splicer.cursor.part) == (1, len(LINES[-1].data))


def test_a_stream_broken_anywhere_resumes_with_no_gap_and_no_duplicate() -> None:
    data = stream(None)
    for cut in range(len(data) + 1):
        first = Splicer(Cursor())
        written = first.feed(data[:cut])
        cursor = replace(first.cursor, size=len(written))
        second = Splicer(cursor)
        written += second.feed(stream(cursor.since()))
        assert written == TEXT, f"broken after byte {cut}"


def test_a_line_without_a_timestamp_is_kept() -> None:
    splicer = Splicer(Cursor())
    assert splicer.feed(b"not stamped\n2023-11-14T22:13:20Z stamped\n") == b"not stamped\nstamped\n"
    assert splicer.unstamped == 1


def test_bytes_written_after_the_last_cursor_are_cut_and_come_again(tmp_path: Path) -> None:
    path = tmp_path / "job" / "worker-0" / "attempt-1.log"
    first = Cursor(size=6, time="2023-11-14T22:13:20Z", lines=1)
    save(path, b"line1\n", Cursor(), first)
    assert load_cursor(path) == first
    # A crash between the file and its cursor: the file holds more than the cursor says.
    with path.open("ab") as handle:
        handle.write(b"line2\n")
    after = Cursor(size=12, time="2023-11-14T22:13:21Z", lines=1)
    save(path, b"line2\n", load_cursor(path), after)
    assert path.read_bytes() == b"line1\nline2\n"
    assert load_cursor(path) == after
    cursor_path(path).write_text("{torn")
    assert load_cursor(path) == Cursor()  # unreadable: start over (the file is cut)
