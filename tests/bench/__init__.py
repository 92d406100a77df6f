"""Smoke tests of the benchmarks: each runs one at toy size, as its users run it, and
reads the one JSON line it prints last (``run_bench``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def run_bench(
    command: list[str], timeout_s: float
) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """``command`` run from the checkout, which must exit 0: the JSON of its last line of
    output, and the finished process (for what it said on stderr)."""
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines, f"it printed nothing on stdout:\n{done.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result, done
