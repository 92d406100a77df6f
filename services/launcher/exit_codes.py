"""Classifying an ended attempt with the exit-code table (data: ``exit_codes.yaml``).

``classify`` looks at what is known about the end of a task — exit code, signal, a
platform condition Corral detected itself, the tail of the task's output — and returns
the first matching rule's classification: the job's own rules first, then Corral's
table, else ``unknown``. Which failures are retried is therefore data a user can read
and extend, not code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml
from pydantic import TypeAdapter

from shared.jobs import Classification, ExitRule

TABLE_PATH = Path(__file__).parent / "exit_codes.yaml"
LOG_TAIL_BYTES = 4096


@dataclass(frozen=True)
class TaskEnd:
    exit_code: int | None
    signal: int | None = None
    platform: str | None = None
    log_tail: str = ""


@dataclass(frozen=True)
class Verdict:
    classification: Classification
    reason: str


@cache
def default_table(path: Path = TABLE_PATH) -> tuple[ExitRule, ...]:
    document = yaml.safe_load(path.read_text())
    return tuple(TypeAdapter(list[ExitRule]).validate_python(document["rules"]))


def _matches(rule: ExitRule, end: TaskEnd) -> bool:
    if rule.platform is not None and rule.platform != end.platform:
        return False
    code_ok = rule.exit_codes is None or end.exit_code in rule.exit_codes
    signal_ok = rule.signals is None or end.signal in rule.signals
    if rule.exit_codes is not None and rule.signals is not None:
        # Either form of the same death will do: a shell reports SIGKILL as 137.
        code_ok = signal_ok = code_ok or signal_ok
    if not (code_ok and signal_ok):
        return False
    return rule.log_pattern is None or re.search(rule.log_pattern, end.log_tail) is not None


def classify(end: TaskEnd, job_rules: tuple[ExitRule, ...] | list[ExitRule] = ()) -> Verdict:
    for rule in (*job_rules, *default_table()):
        if _matches(rule, end):
            return Verdict(rule.classification, rule.reason or rule.classification)
    if end.exit_code is not None:
        return Verdict("unknown", f"exited with code {end.exit_code}")
    if end.signal is not None:
        return Verdict("unknown", f"killed by signal {end.signal}")
    return Verdict("unknown", "ended for an unknown reason")


def read_log_tail(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - LOG_TAIL_BYTES))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
