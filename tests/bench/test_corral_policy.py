"""Corral's policy replayed (``bench.simulate --policy corral``: the live planner itself,
bench/sim/policy/corral.py): a long job starved by a stream of short ones.

One node of 4 GPUs. A 1-GPU job of 100 h arrives with the first of a wave of four 1-GPU
jobs of 1,000 s every 1,000 s for three days: the node is always full of short jobs.
Under plain LAS the long job, once demoted, waits for the stream to end; Corral's
starvation guard promotes it once it has waited the guard's floor (12 h: the short jobs
hardly wait), and from then on it runs to the end.
"""

from __future__ import annotations

import random

import pytest

from bench.sim import engine as sim_engine
from bench.sim.engine import Finished, simulate
from bench.sim.policy import Cluster, make_policy
from bench.sim.policy.corral import GPU_TYPE, CorralPolicy
from bench.sim.policy.jobs import Job, JobId
from bench.sim.traces import TraceJob
from services.scheduler.model import PendingJob, RunningJob
from services.scheduler.starvation import StarvationRule

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


@pytest.mark.slow
def test_corral_lets_a_starved_long_job_through_and_keeps_it_running() -> None:
    """The guard promotes it after its floor, and though the jobs it then delays raise the
    load-aware limit past its wait, it is not preempted again."""
    long = _long("corral", 1)
    assert long.queue_s == pytest.approx(StarvationRule().min_wait_s, abs=600)
    assert long.preemptions == 1  # demoted once by the stream, then promoted for good


def test_a_job_wider_than_a_quarter_of_the_cluster_is_not_promoted() -> None:
    assert _long("corral", 2).queue_s >= (WAVES - 4) * 1000


def test_the_simulators_corral_is_the_live_planner() -> None:
    assert isinstance(make_policy("corral"), CorralPolicy)


def test_a_job_back_from_preemption_keeps_its_place_by_submission() -> None:
    """The replay hands the planner its pending jobs as the live cycle reads them, by
    submission (``ORDER BY created_at``): a preempted job that comes back is not sent
    behind the jobs submitted after it."""
    first, second = Job(JobId("first"), 0, 0.0, 4, "vc"), Job(JobId("second"), 1, 10.0, 4, "vc")
    for back in (first, second):  # both ran 1,000 GPU-s before: one service level
        back.attained_gpu_s = 1000.0
    replay = CorralPolicy()
    replay.submit(second, 20.0)
    replay.submit(first, 30.0)  # preempted last, so back in the queue last
    started = replay.schedule(40.0, Cluster(1, 4)).started
    assert [job.id for job in started] == ["first"]


class FreshSnapshots(CorralPolicy):
    """The replay as it was before it kept its snapshots between rounds: every pending and
    running job built afresh each round, from the job as it is then."""

    def _pending_job(self, job: Job, now: float) -> PendingJob:
        tasks = self._tasks(job.gpus, self._per_node)
        return PendingJob(
            job.id, 1, 0, tasks, user=job.vc, gpu_type=GPU_TYPE,
            attained_gpu_s=job.attained_gpu_s, waited_s=job.waited_at(now),
        )  # fmt: skip

    def _running_job(self, job: Job, now: float) -> RunningJob:
        assert job.placement is not None
        slices = tuple((str(piece.node), piece.gpus) for piece in job.placement.slices)
        return RunningJob(
            job.id, "default", job.vc, 0, GPU_TYPE, slices, borrowed=True, runtime_s=now - job.since_s,
            attained_gpu_s=job.attained_at(now), waited_s=job.waited_s, promoted=job.id in self.promoted,
        )  # fmt: skip


@pytest.mark.slow
def test_kept_snapshots_replay_exactly_as_fresh_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay keeps each job's snapshot between rounds (built once, then brought up to
    date) for speed; a busy trace with preemptions, moves and restarts on other nodes must
    come out exactly as when every snapshot is built afresh."""
    rng = random.Random(7)
    trace, now = [], 0.0
    for i in range(400):
        now += rng.expovariate(1 / 120)
        gpus = rng.choice((1, 1, 1, 2, 4, 8, 8, 16))
        trace.append(TraceJob(f"j{i}", now, gpus, rng.lognormvariate(7.5, 1.5), f"u{i % 3}", i + 2))

    def outcome() -> list[tuple[str, float, int]]:
        finished = simulate(trace, "corral", nodes=4, gpus_per_node=8).finished
        return sorted((f.job_id, f.finish_s, f.preemptions) for f in finished)

    kept = outcome()
    monkeypatch.setattr(sim_engine, "make_policy", lambda _name, _oracle=None: FreshSnapshots())
    assert outcome() == kept
    assert sum(preemptions for _, _, preemptions in kept) >= 20  # restarts were exercised
