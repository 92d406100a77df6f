"""``python -m bench.serving`` at toy size: it starts its own stack, serves a replica
through the gateway, times it against the replica's own port, runs the closed loop
(a job's output registered as a model, served), and keeps its JSON contract (the real
figures come from a full run)."""

from __future__ import annotations

import sys

import pytest

from tests.bench import run_bench

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(240)
def test_a_small_run_measures_overhead_throughput_and_the_closed_loop() -> None:
    command = [
        sys.executable,
        "-m",
        "bench.serving",
        "--requests",
        "100",
        "--concurrency",
        "4",
        "--seconds",
        "1",
    ]
    result, _ = run_bench(command, timeout_s=230)
    assert (result["bench"], result["requests"], result["concurrency"]) == ("serving", 100, 4)
    assert result["direct_p50_ms"] > 0
    assert result["gateway_p50_ms"] == pytest.approx(
        result["direct_p50_ms"] + result["gateway_overhead_p50_ms"], abs=0.002
    )
    assert result["requests_per_s"] > 0
    assert result["failed_requests"] == 0
    # The requests went through the API process, not around it.
    assert result["api_cpu_s"] > 0
    assert result.get("closed_loop_error") is None
    assert result["register_to_first_request_s"] > 0
