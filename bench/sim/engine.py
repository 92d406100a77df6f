"""The trace replay: a discrete-event simulation of one cluster under one policy.

The clock jumps from event to event — arrivals (from the sorted trace), completions and
policy wake-ups (from one heap) — and never ticks. After all events of an instant are
applied, the policy runs one round; its starts schedule completions, its preemptions
cancel them. Heap entries carry the job's *epoch* (bumped whenever it starts or stops),
so entries made stale by a preemption are dropped when popped instead of being searched
for and removed.

Rounds are skipped when they cannot change anything: no pending job, or no free GPU
under a policy that never preempts.

Assumptions, the same for every policy:

- A job runs for exactly its trace duration on any placement (no slowdown from spanning
  nodes; placement rules in bench/sim/policy/cluster.py).
- Preemption checkpoints: a preempted job keeps all the progress it made and resumes
  where it stopped, after `restart_overhead_s` of extra run time on each restart
  (0 by default, i.e. free, instant checkpoints — optimistic for preempting policies).
- A job that needs more GPUs than the whole cluster has can never run; it is not
  replayed and is counted in `skipped_too_big`.
- Scheduling itself takes no simulated time.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from bench.sim.policy import NEEDS_ORACLE, Cluster, Job, JobId, Policy, make_policy
from bench.sim.traces import TraceJob

_COMPLETE, _WAKE = 0, 1  # completions are applied before wake-ups of the same instant


class SimulationStuck(Exception):
    """The policy left jobs pending on an idle cluster with nothing left to happen."""


@dataclass(frozen=True)
class Finished:
    job_id: str
    submit_s: float
    gpus: int
    duration_s: float
    finish_s: float
    executed_s: float  # time holding GPUs: the duration plus any restart overheads
    preemptions: int

    @property
    def jct_s(self) -> float:
        return self.finish_s - self.submit_s

    @property
    def queue_s(self) -> float:
        return self.jct_s - self.executed_s


@dataclass(frozen=True)
class Outcome:
    finished: list[Finished]
    skipped_too_big: int
    rounds: int
    total_gpus: int


# Called after every round with the running jobs and the cluster: for invariant checks.
RoundObserver = Callable[[float, Collection[Job], Cluster], None]


def simulate(
    trace: Sequence[TraceJob],
    policy_name: str,
    nodes: int,
    gpus_per_node: int,
    restart_overhead_s: float = 0.0,
    observer: RoundObserver | None = None,
) -> Outcome:
    cluster = Cluster(nodes, gpus_per_node)
    replayed = sorted((t for t in trace if t.gpus <= cluster.total_gpus), key=lambda t: t.submit_s)
    jobs = [Job(JobId(t.job_id), i, t.submit_s, t.gpus, t.vc) for i, t in enumerate(replayed)]
    durations = [t.duration_s for t in replayed]
    oracle = (lambda job: durations[job.seq]) if policy_name in NEEDS_ORACLE else None
    policy = make_policy(policy_name, oracle)
    sim = _Replay(policy, cluster, jobs, durations, restart_overhead_s, observer)
    sim.run()
    return Outcome(sim.finished, len(trace) - len(replayed), sim.rounds, cluster.total_gpus)


class _Replay:
    def __init__(
        self,
        policy: Policy,
        cluster: Cluster,
        jobs: list[Job],
        durations: list[float],
        overhead_s: float,
        observer: RoundObserver | None,
    ) -> None:
        self.observer = observer
        self.policy, self.cluster, self.jobs = policy, cluster, jobs
        self.durations = durations  # true run times, known to the simulator only
        self.overhead_s = overhead_s
        self.epoch = [0] * len(jobs)
        self.events: list[tuple[float, int, int, int]] = []  # (time, kind, job seq, epoch)
        # Dicts as insertion-ordered sets, keyed by seq.
        self.pending: dict[int, Job] = {}
        self.running: dict[int, Job] = {}
        self.finished: list[Finished] = []
        self.rounds = 0

    def _wake(self, job: Job, now: float) -> None:
        at = self.policy.wake_at(job, now)
        if at is not None and at > now:
            heapq.heappush(self.events, (at, _WAKE, job.seq, self.epoch[job.seq]))

    def run(self) -> None:
        jobs, events = self.jobs, self.events
        arrived = 0
        while arrived < len(jobs) or events:
            now = jobs[arrived].submit_s if arrived < len(jobs) else float("inf")
            if events and events[0][0] < now:
                now = events[0][0]
            woken: list[Job] = []
            while events and events[0][0] <= now:
                _, kind, seq, epoch = heapq.heappop(events)
                if epoch != self.epoch[seq]:
                    continue  # made stale by a start or a preemption
                if kind == _COMPLETE:
                    self._complete(jobs[seq], now)
                else:
                    woken.append(jobs[seq])
            for job in woken:
                self._wake(job, now)  # the policy re-ranks it before the round
            while arrived < len(jobs) and jobs[arrived].submit_s <= now:
                job = jobs[arrived]
                self.pending[job.seq] = job
                self.policy.submit(job, now)
                self._wake(job, now)
                arrived += 1
            self._round(now)
            if not events and arrived == len(jobs) and self.pending:
                stuck = len(self.pending)
                raise SimulationStuck(
                    f"{self.policy.name}: {stuck} job(s) pending on an idle cluster at t={now:.0f}s"
                )

    def _round(self, now: float) -> None:
        if not self.pending or (self.cluster.free_total == 0 and not self.policy.preemptive):
            return
        self.rounds += 1
        decided = self.policy.schedule(now, self.cluster)
        for job in decided.preempted:
            del self.running[job.seq]
            self.pending[job.seq] = job
            self.epoch[job.seq] += 1
            self._wake(job, now)
        for job in decided.started:
            del self.pending[job.seq]
            self.running[job.seq] = job
            self.epoch[job.seq] += 1
            # Each restart after a preemption costs `overhead_s` of extra run time.
            left = self.durations[job.seq] + self.overhead_s * job.preemptions - job.executed_s
            heapq.heappush(self.events, (now + max(0.0, left), _COMPLETE, job.seq, self.epoch[job.seq]))
            self._wake(job, now)
        if self.observer is not None:
            self.observer(now, self.running.values(), self.cluster)

    def _complete(self, job: Job, now: float) -> None:
        self.cluster.release(job.stop(now))
        del self.running[job.seq]
        self.epoch[job.seq] += 1
        self.policy.finished(job, now)
        self.finished.append(
            Finished(
                job.id, job.submit_s, job.gpus, self.durations[job.seq], now, job.executed_s, job.preemptions
            )
        )
