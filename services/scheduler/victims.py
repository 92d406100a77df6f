"""Preemption victims: which running jobs to stop so a waiting job fits, cheapest first.

Running jobs of each GPU type are sorted by cost once per cycle (already stopping, then
borrowed, then lowest priority, then least progress lost) and looked at lazily: a search
usually stops after a few. A search is a what-if on the planner's node index: each
candidate's GPUs are given back in turn until the gang fits, then everything is taken
again, so the index ends as it began except for the free GPUs the placement will use,
which are then held for the waiting job. Only the victims the placement needs (and those
its VC's quota needs) are kept. Searches per cycle and candidates per search are bounded
(``PlanSettings``), so a long queue of jobs that all need victims cannot make one cycle slow.

Service replicas (``RunningJob.service``) are kept out of every search but one: a batch job
never stops a replica, whatever the rule (a service is what users are calling right now,
and its replica runs within its VC's quota, so no reclaim needs it); a replica of a higher
priority may stop a lower-priority replica of its VC (``own_vc``). ``protected`` says so.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from services.scheduler.model import PendingJob, PlanSettings, RunningJob
from services.scheduler.moves import choose_movers, could_make_room
from services.scheduler.node_index import NodeIndex
from services.scheduler.placement import place_gang, unplace
from services.scheduler.what_if import give_back, share_fits, take_again

# reclaim: a guaranteed job takes back borrowed GPUs; own_vc: a job within its VC's quota
# preempts lower-priority jobs of its VC; priority: lower-priority borrowed jobs anywhere;
# service: jobs of its VC (or borrowed ones) of its priority with more attained service;
# move: small jobs that the other nodes' free GPUs can take, off the node it needs (moves.py).
VictimRule = Literal["reclaim", "own_vc", "priority", "service", "move"]


def protected(running: RunningJob, job: PendingJob, rule: VictimRule) -> bool:
    """Whether ``running`` is out of ``job``'s reach under ``rule``: a service replica,
    unless ``job`` is one of a higher priority preempting within its VC. A replica already
    being stopped frees its GPUs anyway, so it is never protected."""
    if not running.service or running.preempting:
        return False
    return not (job.service and rule == "own_vc" and running.priority < job.priority)


@dataclass
class Candidate:
    """A running job as a possible victim, with what taking it back would free."""

    job: RunningJob
    free_already: bool  # being preempted already: its GPUs are coming free anyway


class VictimFinder:
    """The running jobs of one cycle as possible victims, and the searches among them."""

    def __init__(
        self, index: NodeIndex, running: Sequence[RunningJob], settings: PlanSettings, cluster_gpus: int = 0
    ) -> None:
        self.index = index
        self.cluster_gpus = cluster_gpus
        self.settings = settings
        self.running_on: dict[str, list[RunningJob]] = {}  # by GPU type
        for job in running:
            if job.gpus:
                of_type = self.running_on.get(job.gpu_type)
                if of_type is None:
                    of_type = self.running_on[job.gpu_type] = []
                of_type.append(job)
        self._by_cost: dict[tuple[str, str], list[RunningJob]] = {}  # sorted on first use: see by_cost
        self._guaranteed: dict[str, dict[str, list[RunningJob]]] = {}  # by type, then VC
        self._reclaimable: dict[str, list[RunningJob]] = {}  # by_cost's head, sorted on first use
        self._by_service: dict[str, list[RunningJob]] = {}  # highest service level first
        self._top_level: dict[str, int] = {}
        self._on_node: dict[str, dict[str, list[RunningJob]]] = {}  # by type, then node: see on_node
        self.claimed: set[str] = set()  # victims promised to a job this cycle
        self.searches = 0

    def by_cost(self, gpu_type: str, vc: str) -> list[RunningJob]:
        """Running jobs of a type that a job of ``vc`` could take, cheapest first: already
        stopping, borrowed (of any VC), then ``vc``'s own guaranteed ones; lowest priority,
        then least progress lost. Other VCs' guaranteed jobs are no one's victims but their
        own VC's, so each VC's are sorted apart, when a job of that VC first asks."""
        if (gpu_type, vc) not in self._by_cost:
            if gpu_type not in self._guaranteed:  # one pass groups the type's by VC
                by_vc: dict[str, list[RunningJob]] = {}
                for r in self.running_on.get(gpu_type, ()):
                    if not (r.preempting or r.borrowed):
                        by_vc.setdefault(r.vc, []).append(r)
                self._guaranteed[gpu_type] = by_vc
            own = sorted(
                self._guaranteed[gpu_type].get(vc, ()), key=lambda r: (r.priority, r.runtime_s, r.job_id)
            )
            self._by_cost[(gpu_type, vc)] = self.reclaimable(gpu_type) + own
        return self._by_cost[(gpu_type, vc)]

    def reclaimable(self, gpu_type: str) -> list[RunningJob]:
        """The head of ``by_cost``: the jobs already stopping, then the borrowed ones. All
        that the reclaim and priority rules can take, so only the own-VC rule (rare) pays
        for sorting the guaranteed jobs behind them."""
        if gpu_type not in self._reclaimable:
            self._reclaimable[gpu_type] = sorted(
                (r for r in self.running_on.get(gpu_type, ()) if r.preempting or r.borrowed),
                key=lambda r: (not r.preempting, not r.borrowed, r.priority, r.runtime_s, r.job_id),
            )
        return self._reclaimable[gpu_type]

    def by_service(self, gpu_type: str) -> list[RunningJob]:
        """Running jobs of a type, already stopping first, then highest service level; within
        a level, jobs too wide for the starvation guard to promote last (nothing else gets
        a preempted one back: on a 16-node slice a 64-GPU gang, preempted first as the most
        served, waited 8 days), then most attained service."""
        if gpu_type not in self._by_service:
            level, wide = self.settings.service_level, self.settings.starve_max_share * self.cluster_gpus
            self._by_service[gpu_type] = sorted(
                self.running_on.get(gpu_type, ()),
                key=lambda r: (
                    not r.preempting,
                    -level(r.attained_gpu_s),
                    r.gpus > wide,
                    -r.attained_gpu_s,
                    r.job_id,
                ),
            )
        return self._by_service[gpu_type]

    def on_node(self, gpu_type: str) -> dict[str, list[RunningJob]]:
        """The type's running jobs that hold GPUs on one node, by node (for moves)."""
        by_node = self._on_node.get(gpu_type)
        if by_node is None:
            by_node = self._on_node[gpu_type] = {}
            for running in self.running_on.get(gpu_type, ()):
                if len(running.slices) == 1 and not running.shares:  # a share is never moved
                    by_node.setdefault(running.slices[0][0], []).append(running)
        return by_node

    def top_level(self, gpu_type: str) -> int:
        """The highest service level among the running jobs of a type (-1: none runs)."""
        if gpu_type not in self._top_level:
            served = max((r.attained_gpu_s for r in self.running_on.get(gpu_type, ())), default=None)
            self._top_level[gpu_type] = -1 if served is None else self.settings.service_level(served)
        return self._top_level[gpu_type]

    def service_candidates(self, job: PendingJob, gpu_type: str, level: int) -> Iterator[Candidate]:
        """Least attained service: jobs of ``job``'s priority, of its VC or borrowed, whose
        service level is above ``level`` (the job's; -1 when the starvation guard promoted
        it) and that ran ``min_runtime_s``, never a promoted one; in ``by_service`` order."""
        for running in self.by_service(gpu_type):
            if running.job_id in self.claimed or protected(running, job, "service"):
                continue
            if running.preempting:
                yield Candidate(running, free_already=True)
                continue
            if self.settings.service_level(running.attained_gpu_s) <= level:
                return  # sorted by service level: nobody further is above the job's
            if (
                running.priority == job.priority
                and (running.borrowed or running.vc == job.vc)
                and running.runtime_s >= self.settings.min_runtime_s
                and not running.promoted
            ):
                yield Candidate(running, free_already=False)

    def candidates(
        self, job: PendingJob, gpu_type: str, rule: VictimRule, level: int = 0
    ) -> Iterator[Candidate]:
        """Possible victims for ``job`` on ``gpu_type``, cheapest first, lazily: the running
        jobs of each type are sorted by cost once per cycle, and a search usually stops
        after a few. ``reclaim``: borrowed jobs, any priority (a guaranteed job asks);
        ``own_vc``: also the job's own VC's guaranteed jobs of lower priority;
        ``priority``: borrowed jobs of lower priority. Jobs already stopping come first,
        free; priority victims must have run ``min_runtime_s``."""
        if rule == "service":
            yield from self.service_candidates(job, gpu_type, level)
            return
        if rule == "move":
            on_node = self.on_node(gpu_type)
            movers = choose_movers(job, gpu_type, self.index, on_node, self.claimed, self.settings)
            yield from (
                Candidate(mover, free_already=False)
                for mover in movers or ()
                if not protected(mover, job, rule)
            )
            return
        min_runtime = self.settings.min_runtime_s
        for running in self.by_cost(gpu_type, job.vc) if rule == "own_vc" else self.reclaimable(gpu_type):
            # The order is (stopping, borrowed, priority, ...): once past what the rule can
            # take, nothing further can be taken either.
            if not running.preempting and not running.borrowed and rule != "own_vc":
                return
            if not running.preempting and rule != "reclaim" and running.priority >= job.priority:
                if rule == "priority" or not running.borrowed:
                    return
                continue  # own_vc: borrowed jobs at this priority are past; its own VC's may follow
            if running.job_id in self.claimed or protected(running, job, rule):
                continue
            if running.preempting:
                yield Candidate(running, free_already=True)
            elif running.runtime_s < min_runtime and rule != "reclaim":
                continue
            elif running.borrowed or running.vc == job.vc:
                yield Candidate(running, free_already=False)

    def find(
        self, job: PendingJob, gpu_type: str, rule: VictimRule, *, quota_gap: float = 0, level: int = 0
    ) -> list[Candidate] | None:
        """The fewest cheapest candidates (by ``rule``) whose GPUs let ``job`` fit (and whose
        guaranteed GPUs in the job's VC free ``quota_gap`` of its quota); None if none.

        A what-if on the index itself: each candidate's GPUs are given back in turn until
        the gang fits, then everything is taken again, so the index ends as it began except
        for the free GPUs the placement will use, which are now held for the job."""
        if self.searches >= self.settings.max_victim_searches:
            return None
        if gpu_type not in self.running_on:
            return None
        if rule == "service" and self.top_level(gpu_type) <= level:
            return None  # nobody is served more than the job: no search spent on it
        if rule == "move" and not could_make_room(job, gpu_type, self.index):
            return None  # no search spent on it
        self.searches += 1
        gap = quota_gap
        chosen: list[Candidate] = []
        given: list[tuple[str, tuple[int, ...], int]] = []  # (node, GPUs, share): what-if only
        freed_quota = 0.0
        placements = None
        for candidate in itertools.islice(
            self.candidates(job, gpu_type, rule, level), self.settings.max_victims_examined
        ):
            chosen.append(candidate)
            given.extend(give_back(self.index, candidate.job))
            if candidate.job.vc == job.vc and not candidate.job.borrowed:
                freed_quota += candidate.job.gpus
            if round(freed_quota, 3) >= gap:  # (shares count in thousandths: no float dust)
                placements = place_gang(job, self.index, gpu_type)
                if placements is not None:
                    break
        if placements is not None:
            unplace(self.index, job, placements)
        take_again(self.index, given)
        if placements is None:
            return None
        # Keep only the victims the placement uses (and those the quota needs), then hold
        # the placement's GPUs that are free now for the job.
        used = {(p.node_id, g) for p in placements for g in p.gpu_indices}
        needed: list[Candidate] = []
        freed_quota = 0.0
        for candidate in chosen:
            own = candidate.job.vc == job.vc and not candidate.job.borrowed
            touches = any((node, g) in used for node, gpus in candidate.job.slices for g in gpus)
            if touches or (own and freed_quota < gap):
                needed.append(candidate)
                freed_quota += candidate.job.gpus if own else 0
        victim_gpus = {(node, g) for c in needed for node, gpus in c.job.slices for g in gpus}
        for placement in placements:
            held = [g for g in placement.gpu_indices if (placement.node_id, g) not in victim_gpus]
            if not held:
                continue
            if placement.gpu_milli:
                # A share on a GPU no victim holds had room without them: keep it for the job.
                if share_fits(self.index, placement.node_id, held[0], placement.gpu_milli):
                    self.index.take_share(placement.node_id, held[0], placement.gpu_milli)
            else:
                self.index.take_exact(placement.node_id, held)
        return needed
