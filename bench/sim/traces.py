"""Reading job traces: one CSV row per job, validated, with errors that name the line.

Format (../shared/traces/README.md): a header naming at least the columns
`job_id,submit_time_s,gpus,duration_s,vc`, in any order; other columns (`status`,
`submit_ts`, ...) are ignored. Rules, each reported with the file's line number:

- `job_id` is non-empty and unique;
- `submit_time_s` is a finite number (negative is fine: the Philly trace counts from Oct 1);
- `gpus` is a whole number ≥ 1;
- `duration_s` is a finite number ≥ 0;
- every row has as many fields as the header.

Blank lines are skipped. Rows need not be sorted: jobs are returned in submission order,
file order breaking ties.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

REQUIRED = ("job_id", "submit_time_s", "gpus", "duration_s", "vc")


class TraceError(Exception):
    """A trace that cannot be replayed; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class TraceJob:
    job_id: str
    submit_s: float
    gpus: int
    duration_s: float
    vc: str
    line: int


def load_trace(path: Path) -> list[TraceJob]:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            jobs = _parse(path.name, handle.read().splitlines())
    except OSError as error:
        raise TraceError(f"cannot read trace {path}: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise TraceError(f"{path.name}: not UTF-8 text ({error.reason} at byte {error.start})") from error
    return sorted(jobs, key=lambda j: j.submit_s)  # stable: file order breaks ties


def _parse(name: str, lines: list[str]) -> list[TraceJob]:
    rows = ((number, line) for number, line in enumerate(lines, start=1) if line.strip())
    first = next(rows, None)
    if first is None:
        raise TraceError(f"{name}: the file is empty; expected a header {','.join(REQUIRED)}")
    header_line, header_text = first
    header = [column.strip() for column in next(csv.reader([header_text]))]
    missing = [column for column in REQUIRED if column not in header]
    if missing:
        raise TraceError(
            f"{name} line {header_line}: header lacks column(s) {', '.join(missing)}; "
            f"expected {','.join(REQUIRED)}[,status]"
        )
    index = {column: header.index(column) for column in REQUIRED}
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    for number, text in rows:
        fields = next(csv.reader([text]))
        if len(fields) != len(header):
            raise TraceError(f"{name} line {number}: {len(fields)} fields, but the header has {len(header)}")
        job = _job(name, number, {column: fields[i].strip() for column, i in index.items()})
        if job.job_id in seen:
            raise TraceError(
                f"{name} line {number}: job_id {job.job_id!r} already used on line {seen[job.job_id]}"
            )
        seen[job.job_id] = number
        jobs.append(job)
    if not jobs:
        raise TraceError(f"{name}: no jobs after the header")
    return jobs


def _job(name: str, number: int, row: dict[str, str]) -> TraceJob:
    def bad(column: str, expected: str) -> TraceError:
        return TraceError(f"{name} line {number}: {column} must be {expected}, got {row[column]!r}")

    if not row["job_id"]:
        raise bad("job_id", "non-empty")
    submit = _number(row["submit_time_s"])
    if submit is None:
        raise bad("submit_time_s", "a finite number of seconds")
    try:
        gpus = int(row["gpus"])
    except ValueError:
        raise bad("gpus", "a whole number ≥ 1") from None
    if gpus < 1:
        raise bad("gpus", "a whole number ≥ 1")
    duration = _number(row["duration_s"])
    if duration is None or duration < 0:
        raise bad("duration_s", "a finite number of seconds ≥ 0")
    return TraceJob(row["job_id"], submit, gpus, duration, row["vc"], number)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
