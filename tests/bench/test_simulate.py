"""The trace simulator: exact results on a hand-made trace, clear errors, the JSON contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.sim.engine import simulate
from bench.sim.traces import TraceError, TraceJob, load_trace
from bench.simulate import main, percentile, summarize

REPO = Path(__file__).resolve().parents[2]
KEYS = {
    "avg_jct_s",
    "p50_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "p99_queue_s",
    "p999_queue_s",
    "makespan_s",
    "gpu_utilization",
    "preemptions",
    "wall_s",
    "policy",
    "trace",
    "jobs",
}

# One node with 2 GPUs. Worked by hand:
#   fifo: a 0-10; at 10 b starts (1 GPU) and c (2 GPUs) blocks d; c 15-18; d 18-19.
#   sjf (by duration, strict): a 0-10; at 10 d (1 s) starts, c blocks b; c 11-14; b 14-19.
#   fifo_bf (EASY): like fifo, but at 10 d (ends 11) backfills before c's reservation at 15.
TINY = """job_id,submit_time_s,gpus,duration_s,vc,status
a,0,2,10,vc1,unknown
b,1,1,5,vc1,unknown
c,2,2,3,vc1,unknown
d,3,1,1,vc1,unknown
"""


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.csv"
    path.write_text(TINY)
    return path


def _finish_times(path: Path, policy: str) -> dict[str, float]:
    outcome = simulate(load_trace(path), policy, nodes=1, gpus_per_node=2)
    return {f.job_id: f.finish_s for f in outcome.finished}


@pytest.mark.parametrize(
    ("policy", "finish"),
    [
        ("fifo", {"a": 10, "b": 15, "c": 18, "d": 19}),
        ("sjf", {"a": 10, "b": 19, "c": 14, "d": 11}),
        ("fifo_bf", {"a": 10, "b": 15, "c": 18, "d": 11}),
    ],
)
def test_hand_computed_schedules(tiny: Path, policy: str, finish: dict[str, float]) -> None:
    assert _finish_times(tiny, policy) == finish


def test_hand_computed_metrics_for_fifo(tiny: Path) -> None:
    result = summarize(simulate(load_trace(tiny), "fifo", nodes=1, gpus_per_node=2))
    # JCTs 10, 14, 16, 16; queueing 0, 9, 13, 15; 32 GPU-seconds used of 2 GPUs x 19 s.
    assert result["avg_jct_s"] == 14.0
    assert result["p50_jct_s"] == 15.0
    assert result["avg_queue_s"] == 9.25
    assert result["makespan_s"] == 19.0
    assert result["gpu_utilization"] == round(32 / 38, 4)
    assert result["preemptions"] == 0


def test_hand_computed_metrics_for_sjf(tiny: Path) -> None:
    result = summarize(simulate(load_trace(tiny), "sjf", nodes=1, gpus_per_node=2))
    # JCTs 10, 18, 12, 8; queueing 0, 13, 9, 7.
    assert result["avg_jct_s"] == 12.0
    assert result["p50_jct_s"] == 11.0
    assert result["avg_queue_s"] == 7.25


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([10.0, 14.0, 16.0, 16.0], 50) == 15.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 99.9) == pytest.approx(4.996)
    assert percentile([7.0], 99) == 7.0


def test_jobs_wider_than_the_cluster_are_skipped_and_counted() -> None:
    trace = [TraceJob("wide", 0, 4, 10, "vc", 2), TraceJob("ok", 0, 2, 10, "vc", 3)]
    outcome = simulate(trace, "corral", nodes=1, gpus_per_node=2)
    assert [f.job_id for f in outcome.finished] == ["ok"]
    assert outcome.skipped_too_big == 1


def test_cli_prints_one_json_line_with_every_key(tiny: Path) -> None:
    command = [sys.executable, "-m", "bench.simulate", "--trace", str(tiny), "--nodes", "1"]
    command += ["--gpus-per-node", "2", "--policy", "fifo"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True, timeout=60)
    last = done.stdout.strip().splitlines()[-1]
    result = json.loads(last)
    assert result.keys() >= KEYS
    assert result["jobs"] == 4
    assert result["avg_jct_s"] == 14.0


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ("a,0,2,10,vc\nb,1,two,5,vc\n", "line 3: gpus must be a whole number"),
        ("a,0,2,10,vc\nb,1,0,5,vc\n", "line 3: gpus must be a whole number"),
        ("a,0,2,10,vc\nb,soon,1,5,vc\n", "line 3: submit_time_s must be a finite number"),
        ("a,0,2,-1,vc\n", "line 2: duration_s must be a finite number of seconds ≥ 0"),
        ("a,0,2,10,vc\n\nb,1,1,5\n", "line 4: 4 fields, but the header has 5"),
        ("a,0,2,10,vc\na,1,1,5,vc\n", "line 3: job_id 'a' already used on line 2"),
    ],
)
def test_a_malformed_trace_names_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: str, expected: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("job_id,submit_time_s,gpus,duration_s,vc\n" + rows)
    with pytest.raises(TraceError, match=expected):
        load_trace(path)
    assert main(["--trace", str(path), "--nodes", "1", "--policy", "fifo"]) == 2
    captured = capsys.readouterr()
    assert expected in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_a_header_without_the_required_columns_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("id,submit,gpus\n1,0,1\n")
    with pytest.raises(TraceError, match="line 1: header lacks column"):
        load_trace(path)


def test_a_missing_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--trace", str(tmp_path / "nope.csv"), "--nodes", "1", "--policy", "fifo"]) == 2
    assert "cannot read trace" in capsys.readouterr().err
