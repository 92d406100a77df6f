"""The virtual-cluster promise: a VC never waits longer than it would on a private cluster
of its quota's size.

The live policy (``planner.plan``) is run cycle by cycle over a small simulated clock,
twice for the same VC's jobs: once on a shared cluster where other teams (another VC with
a quota, and quota-less borrowers) have flooded every GPU first, and once alone on a
private cluster exactly its quota's size. Every job of the VC starts on the shared
cluster no later than on its private one — or, while it waits longer, its VC holds at
least its whole quota with its other jobs: it is then getting all a private cluster could
give it, and more (a big job it borrowed for, which on its private cluster would still be
queued, can run ahead of a small one that would have run there first). What a VC may
never see is a job that fits its unused quota left waiting.

What the simulation models: jobs end when their run time is over; a preempted job stops
at once, frees its GPUs and goes back to the queue to run again from the start, and the
policy runs again in the same instant (the live scheduler is woken by the job's
preemption; that a real job takes its grace period to stop is the one delay a VC pays
for having lent its GPUs). Run times are known to the simulation only, never the policy.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import pytest

from services.scheduler.model import (
    NodeCapacity,
    PendingJob,
    PlanSettings,
    RunningJob,
    TaskDemand,
    VirtualCluster,
)
from services.scheduler.planner import plan

GPUS_PER_NODE = 8
QUOTA = 16  # the VC under test ("team"): two nodes' worth


@dataclass
class SimJob:
    job: PendingJob
    submit: int
    duration: int


@dataclass
class Simulation:
    nodes: int
    vcs: dict[str, VirtualCluster]
    free: dict[str, set[int]] = field(default_factory=dict)
    running: dict[str, tuple[RunningJob, int, int]] = field(default_factory=dict)  # job, started, ends
    stopping: set[str] = field(default_factory=set)  # preempted: stopped before the next cycle
    first_start: dict[str, int] = field(default_factory=dict)
    held: dict[int, float] = field(default_factory=dict)  # the team's GPUs, at the end of each instant
    unfair: list[str] = field(default_factory=list)  # team jobs left waiting with quota unused
    preempted_for_team: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.free = {f"n{i:02d}": set(range(GPUS_PER_NODE)) for i in range(self.nodes)}

    def run(self, jobs: list[SimJob], horizon: int) -> dict[str, int]:
        queue: list[SimJob] = []
        arrivals = sorted(jobs, key=lambda j: j.submit)
        by_id = {j.job.job_id: j for j in jobs}
        for now, again in ((t, again) for t in range(horizon) for again in (False, True)):
            if again and not self.stopping:
                continue  # a second cycle in the same instant only after preemptions
            for job_id in [j for j, (_, _, ends) in self.running.items() if ends <= now]:
                self._release(job_id)
            for job_id in list(self.stopping):
                self._release(job_id)
                queue.append(by_id[job_id])  # back in the queue, to run again from the start
            self.stopping.clear()
            while arrivals and arrivals[0].submit <= now:
                queue.append(arrivals.pop(0))
            queue.sort(key=lambda j: (j.submit, j.job.job_id))
            if not queue:
                if not arrivals and not self.running:
                    break
                continue
            result = plan(
                [j.job for j in queue],
                [
                    NodeCapacity(node, sorted(gpus), total_gpus=GPUS_PER_NODE, gpu_type="H100")
                    for node, gpus in self.free.items()
                ],
                running=[
                    replace(r, runtime_s=float(now - started), preempting=r.job_id in self.stopping)
                    for r, started, _ in self.running.values()
                ],
                vcs=self.vcs,
                settings=PlanSettings(min_runtime_s=0),
            )
            for decision in result.decisions:
                slices = tuple((p.node_id, p.gpu_indices) for p in decision.placements)
                for node, gpus in slices:
                    assert self.free[node] >= set(gpus), "a GPU given twice"
                    self.free[node] -= set(gpus)
                job = decision.job
                running = RunningJob(
                    job.job_id, job.vc, job.user, job.priority, "H100", slices, decision.borrowed
                )
                self.running[job.job_id] = (running, now, now + by_id[job.job_id].duration)
                self.first_start.setdefault(job.job_id, now)
                queue.remove(by_id[job.job_id])
            for preemption in result.preemptions:
                self.stopping.add(preemption.job_id)
                if preemption.for_job.startswith("team-"):
                    self.preempted_for_team.append(preemption.job_id)
            team = [r for r, _, _ in self.running.values() if r.vc == "team"]
            self.held[now] = sum(r.gpus for r in team)
            if not self.stopping:  # settled for this instant: nothing left to reclaim
                guaranteed = sum(r.gpus for r in team if not r.borrowed)
                self.unfair += [
                    f"{j.job.job_id} at {now} ({guaranteed} of {QUOTA} guaranteed GPUs in use)"
                    for j in queue
                    if j.job.vc == "team" and guaranteed + j.job.gpus <= QUOTA
                ]
        return self.first_start

    def _release(self, job_id: str) -> None:
        running, _, _ = self.running.pop(job_id)
        for node, gpus in running.slices:
            self.free[node] |= set(gpus)


def _jobs(
    rng: random.Random, vc: str, count: int, submits: tuple[int, int], durations: tuple[int, int]
) -> list[SimJob]:
    jobs = []
    for n in range(count):
        gpus = rng.choice([1, 2, 4, 8, 8, 16])
        # A 16-GPU job is two 8-GPU instances (a gang over two nodes).
        tasks = (TaskDemand("w", 2, 8),) if gpus == 16 else (TaskDemand("w", 1, gpus),)
        job = PendingJob(
            f"{vc}-{n:03d}", 1, 0, tasks, vc=vc, user=rng.choice(["u1", "u2", "u3"]), gpu_type="H100"
        )
        jobs.append(SimJob(job, rng.randint(*submits), rng.randint(*durations)))
    return jobs


@pytest.mark.parametrize("seed", range(8))
def test_a_vc_never_waits_longer_than_on_a_private_cluster_of_its_quota(seed: int) -> None:
    rng = random.Random(seed)
    team = _jobs(rng, "team", 14, submits=(2, 60), durations=(3, 25))
    # Other teams flood all 64 GPUs before the team's first job: another VC with a quota,
    # and borrowers without one, with long jobs.
    others = _jobs(rng, "other", 20, submits=(0, 1), durations=(20, 80))
    borrowers = _jobs(rng, "default", 30, submits=(0, 1), durations=(30, 120))
    vcs = {
        "team": VirtualCluster("team", {"H100": QUOTA}),
        "other": VirtualCluster("other", {"H100": 24}),
        "default": VirtualCluster("default"),
    }
    shared_sim = Simulation(nodes=8, vcs=vcs)
    shared = shared_sim.run(team + others + borrowers, horizon=2000)
    private = Simulation(nodes=QUOTA // GPUS_PER_NODE, vcs={"team": vcs["team"]}).run(
        [SimJob(j.job, j.submit, j.duration) for j in team], horizon=2000
    )
    assert set(private) == {j.job.job_id for j in team}, "every team job ran on its private cluster"
    assert set(shared) >= set(private), "every team job ran on the shared cluster"
    assert not shared_sim.unfair, f"team jobs left waiting while their quota was unused: {shared_sim.unfair}"
    late = {
        job_id: (shared[job_id], start)
        for job_id, start in private.items()
        if shared[job_id] > start
        and any(shared_sim.held.get(t, 0) < QUOTA for t in range(start, shared[job_id]))
    }
    assert not late, f"team jobs started later on the shared cluster than on a private one: {late}"
    # The flood was real: the team got its quota back by preempting borrowers.
    assert shared_sim.preempted_for_team, "no reclaim happened: the scenario tested nothing"
