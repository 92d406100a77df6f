"""Corral's starvation guard, replayed: a long job starved by a stream of short ones.

One node of 4 GPUs. A 1-GPU job of 100 h arrives with the first of a wave of four 1-GPU
jobs of 1,000 s every 1,000 s for three days: the node is always full of short jobs.
Under plain LAS the long job, once demoted, waits for the stream to end;
Corral promotes it once it has waited the guard's limit (12 h here, as the short jobs
hardly wait), and from then on it runs to the end.
"""

from __future__ import annotations

import pytest

from bench.sim_engine import Finished, simulate
from bench.traces import TraceJob
from services.scheduler.policy.corral import STARVE_MIN_WAIT_S
from services.scheduler.policy.jobs import Job, JobId
from services.scheduler.policy.starvation import StarvationGuard

WAVES = 3 * 86400 // 1000


def _stream(long_gpus: int) -> list[TraceJob]:
    trace = [TraceJob("long", 0, long_gpus, 100 * 3600, "vc", 2)]
    for wave in range(WAVES):
        for i in range(4):
            trace.append(TraceJob(f"s{wave}-{i}", wave * 1000, 1, 1000, "vc", len(trace) + 2))
    return trace


def _long(policy: str, long_gpus: int) -> Finished:
    outcome = simulate(_stream(long_gpus), policy, nodes=1, gpus_per_node=4)
    return next(f for f in outcome.finished if f.job_id == "long")


def test_las_starves_the_long_job_until_the_stream_ends() -> None:
    assert _long("las", 1).queue_s >= (WAVES - 4) * 1000  # it ran only the first hour or so


def test_corral_promotes_the_long_job_once_it_has_waited_the_limit() -> None:
    long = _long("corral", 1)
    assert long.queue_s == pytest.approx(STARVE_MIN_WAIT_S)
    assert long.preemptions == 1  # demoted at 900 GPU-s, then never preempted again


def test_a_job_wider_than_a_quarter_of_the_cluster_is_not_promoted() -> None:
    assert _long("corral", 2).queue_s >= (WAVES - 4) * 1000


def test_the_limit_follows_the_typical_wait_of_finished_jobs() -> None:
    guard = StarvationGuard(min_wait_s=100.0, factor=10.0, time_constant_s=1000.0, share=1.0, max_width=1.0)
    assert guard.limit_s() == 100.0
    done = Job(JobId("done"), 0, 0.0, 1, "vc")
    done.waited_s = 50.0
    guard.finished(done, now=10.0)
    assert guard.limit_s() == 500.0  # 10 x the first finished job's wait


def test_a_budget_smaller_than_the_widest_promotable_job_is_refused() -> None:
    with pytest.raises(ValueError, match="max_width <= share"):
        StarvationGuard(min_wait_s=1.0, factor=1.0, time_constant_s=1.0, share=0.2, max_width=0.25)
