"""``python -m bench.ddp_example`` at toy size: it starts its own stack, runs the DDP
example through the API, checks each run as a user would, and keeps its JSON contract
(the thirty-run figures are in the commit that made the example reliable)."""

from __future__ import annotations

import sys

import pytest

from tests.bench import run_bench

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(240)
def test_two_short_runs_succeed_and_print_one_json_line() -> None:
    command = [sys.executable, "-m", "bench.ddp_example", "--runs", "2", "--steps", "5"]
    result, done = run_bench(command, timeout_s=230)
    assert (result["bench"], result["runs"], result["succeeded"], result["failed"]) == (
        "ddp_example",
        2,
        2,
        [],
    )
    assert 0 < result["median_s"] <= result["max_s"]
    assert done.stderr.count(", ok") == 2
