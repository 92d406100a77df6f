"""``python -m bench.outbox_relay`` at toy size: it starts its own stack, times relay
passes both ways and keeps its JSON contract (the real figures are in
docs/performance.md)."""

from __future__ import annotations

import sys

import pytest

from tests.bench import run_bench

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(180)
def test_a_small_run_times_both_ways_and_prints_one_json_line() -> None:
    command = [sys.executable, "-m", "bench.outbox_relay", "--jobs", "4", "--rounds", "2"]
    result, _ = run_bench(command, timeout_s=170)
    assert (result["bench"], result["rows_per_pass"], result["rounds"]) == ("outbox_relay", 12, 2)
    for way in ("one_ack_at_a_time", "jobs_side_by_side"):
        assert result[f"{way}_pass_ms"] > 0
        assert result[f"{way}_rows_per_s"] > 0
    assert result["speedup"] == pytest.approx(
        result["one_ack_at_a_time_pass_ms"] / result["jobs_side_by_side_pass_ms"], rel=0.02
    )
