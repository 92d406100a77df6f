"""The scheduler throughput benchmark: a small run places every job, keeps its JSON contract."""

from __future__ import annotations

import json

import pytest

from bench.sched_throughput import main, make_workload, run


@pytest.mark.usefixtures("restored_gc")  # main sets the collector up as the scheduler's
@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_a_small_run_places_every_job_once(capsys: pytest.CaptureFixture[str], clock: str) -> None:
    assert main(["--nodes", "20", "--jobs", "300", "--clock", clock]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert {"placements_per_s", "cycle_p50_ms", "cycle_p99_ms", "peak_rss_mb"} <= set(result)
    assert result["clock"] == clock
    # Every job is placed once, plus once more per preemption (it returns to the queue).
    assert result["placements"] == 300 + result["preemptions"]
    assert result["placements_per_s"] > 0


def test_the_same_seed_gives_the_same_schedule() -> None:
    first, second = run(10, 8, 100, seed=7), run(10, 8, 100, seed=7)
    assert (first["placements"], first["preemptions"], first["cycles"]) == (
        second["placements"],
        second["preemptions"],
        second["cycles"],
    )


def test_with_cpus_every_job_is_placed_and_asks_cpus_beside_its_gpus() -> None:
    """``--cpus-per-gpu``: nodes report CPUs, tasks ask for them (never more than a node's),
    and the jobs are otherwise the ones a run without CPUs gets."""
    result = run(20, 8, 300, seed=3, cpus_per_gpu=16)
    assert result["placements"] == 300 + int(str(result["preemptions"]))
    plain, with_cpus = make_workload(300, 160, 3).jobs, make_workload(300, 160, 3, cpus_per_gpu=16).jobs
    assert [(j.job_id, j.gpus, j.vc) for j in plain] == [(j.job_id, j.gpus, j.vc) for j in with_cpus]
    assert all(0 < t.cpus <= 128 for j in with_cpus for t in j.tasks)
