"""``python -m bench.api`` at toy sizes: it starts its own stack, measures both parts, and
keeps its JSON contract (the real figures are in docs/performance.md)."""

from __future__ import annotations

import sys

import pytest

from bench.api import percentile
from tests.bench import run_bench


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_a_small_run_prints_one_json_line_with_both_figures() -> None:
    command = [sys.executable, "-m", "bench.api", "--submits", "60", "--warmup", "10", "--concurrency", "4"]
    command += ["--subscribers", "20", "--sse-rate", "20", "--sse-seconds", "0.5", "--sse-burst", "5"]
    result, _ = run_bench(command, timeout_s=170)
    assert result["bench"] == "api"
    for key in ("submits_per_s", "submit_p50_ms", "submit_p99_ms", "api_cpu_ms_per_submit"):
        assert result[key] > 0, key
    assert result["submit_p50_ms"] <= result["submit_p99_ms"]
    assert result["sse_subscribers"] == 20
    assert 0 < result["sse_latency_p50_ms"] <= result["sse_latency_p99_ms"]
    assert result["sse_events_per_s"] > 0
    assert result["sse_deliveries_per_s"] == pytest.approx(result["sse_events_per_s"] * 20, rel=0.01)
    assert result["sse_connections_lost"] == 0


def test_percentile_takes_the_rank_below() -> None:
    assert percentile([float(n) for n in range(1, 101)], 0.99) == 100.0
    assert percentile([5.0, 1.0, 3.0], 0.5) == 3.0


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_openpai_submits_are_measured_beside_native_ones() -> None:
    command = [sys.executable, "-m", "bench.api", "--submits", "40", "--warmup", "5", "--concurrency", "4"]
    command += ["--subscribers", "0", "--openpai", "--rounds", "1"]
    result, _ = run_bench(command, timeout_s=170)
    assert result["submits_per_s"] > 0
    assert result["openpai_submits_per_s"] > 0
    assert result["openpai_ratio"] == pytest.approx(
        result["openpai_submits_per_s"] / result["submits_per_s"], abs=0.001
    )
