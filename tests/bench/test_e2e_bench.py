"""``python -m bench.e2e`` at toy size: it starts its own stack, runs every job to its end,
keeps its JSON contract, and with ``--statements`` says where Postgres' time went (the
real figures are in docs/performance.md)."""

from __future__ import annotations

import json
import sys

import pytest

from tests.bench import run_bench

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(240)
def test_a_small_run_on_two_nodes_and_two_launchers_prints_its_statements_stages_and_one_json_line() -> None:
    command = [
        *(sys.executable, "-m", "bench.e2e", "--jobs", "20", "--probes", "3", "--statements", "5"),
        *("--nodes", "2", "--gpus", "2", "--launcher-processes", "2"),
    ]
    result, done = run_bench(command, timeout_s=230)
    assert (result["bench"], result["jobs"], result["failed_jobs"]) == ("e2e", 20, 0)
    assert result["jobs_per_s"] > 0
    assert 0 < result["start_latency_p50_ms"] <= result["start_latency_p99_ms"]
    assert result["start_latency_p50_ms"] < result["end_latency_p50_ms"] <= result["end_latency_p99_ms"]
    assert result["cpu_ms_per_job"]["postgres"] > 0
    assert result["postgres_statement_ms_per_job"] > 0
    assert result["nodes"] == 2
    assert sum(1 for name in result["cpu_ms_per_job"] if name.startswith("agent")) == 2
    stages = result["stages"]
    assert list(stages) == ["submit→placed", "placed→assigned", "assigned→started", "exited→decided"]
    for name, stage in stages.items():
        assert stage["wall_ms_per_job"] > 0, name
        assert stage["cpu_ms_per_job"] > 0, name
    assert stages["placed→assigned"]["processes"] == ["launcher"]
    launchers = {name: ms for name, ms in result["cpu_ms_per_job"].items() if name.startswith("launcher")}
    assert set(launchers) == {"launcher", "launcher-2"}
    assert stages["placed→assigned"]["cpu_ms_per_job"] == pytest.approx(sum(launchers.values()), abs=0.02)
    listed = done.stderr[done.stderr.index("Postgres statement time") :].splitlines()[1:6]
    assert len(listed) == 5
    assert all(" calls " in line and " rows | " in line for line in listed), listed


@pytest.mark.timeout(240)
def test_several_runs_print_each_and_then_their_medians() -> None:
    command = [
        sys.executable,
        "-m",
        "bench.e2e",
        "--jobs",
        "10",
        "--probes",
        "2",
        "--runs",
        "2",
        "--pause-s",
        "0",
    ]
    result, done = run_bench(command, timeout_s=230)
    runs = [json.loads(line) for line in done.stderr.splitlines() if line.startswith('{"bench"')]
    assert len(runs) == 2
    assert result["runs"] == 2
    assert result["jobs_per_s_each_run"] == [run["jobs_per_s"] for run in runs]
    assert min(result["jobs_per_s_each_run"]) <= result["jobs_per_s"] <= max(result["jobs_per_s_each_run"])
    assert result["failed_jobs"] == 0
    assert set(result["cpu_ms_per_job"]) == set(runs[0]["cpu_ms_per_job"])
    walls = sorted(run["stages"]["assigned→started"]["wall_ms_per_job"] for run in runs)
    assert walls[0] <= result["stages"]["assigned→started"]["wall_ms_per_job"] <= walls[1]
