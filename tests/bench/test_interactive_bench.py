"""``python -m bench.interactive`` at toy size: it starts its own stack, measures exec and
port-forward through the API, NATS and the node agent, and keeps its JSON contract (the
real figures come from a full run)."""

from __future__ import annotations

import sys

import pytest

from tests.bench import run_bench

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(240)
def test_a_small_run_measures_echo_first_byte_and_forward_and_prints_one_json_line() -> None:
    command = [
        sys.executable,
        "-m",
        "bench.interactive",
        "--keystrokes",
        "20",
        "--opens",
        "2",
        "--megabytes",
        "20",
    ]
    result, _ = run_bench(command, timeout_s=230)
    assert (result["bench"], result["keystrokes"], result["opens"]) == ("interactive", 20, 2)
    assert 0 < result["exec_echo_p50_ms"] <= result["exec_echo_p99_ms"] <= result["exec_echo_max_ms"]
    assert 0 < result["first_byte_ms"] <= result["first_byte_max_ms"]
    assert result["forward_mb_per_s"] == min(
        result["forward_upload_mb_per_s"], result["forward_download_mb_per_s"]
    )
    assert result["forward_mb_per_s"] > 0
    # The bytes went through the API and the node agent, not around them.
    assert result["forward_cpu_s"]["api"] > 0
    assert result["forward_cpu_s"]["agent"] > 0
