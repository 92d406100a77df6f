"""Priority-ordered gang scheduling, with optional preemption: the engine under every policy.

A priority policy only says how urgent each job is (`pending_key`, `running_key`;
smaller is more urgent); `PriorityPolicy` turns that order into starts and preemptions,
so FIFO, SJF, SRTF, Tiresias-LAS and Corral differ in their keys and not in subtle
placement details.

One round walks the pending jobs from most to least urgent:

1. If the job's gang fits in the free GPUs, it starts (best-fit placement, cluster.py).
2. Otherwise, with ``strict`` (head-of-line blocking, as strict FIFO) the round ends.
3. Otherwise, if preemptive, it looks for *victims*: running jobs strictly less urgent
   (and `preemptible`). Victims are chosen per node, least urgent first, and the nodes
   whose clearing costs the fewest victim GPUs win — so a 1-GPU job displaces one 1-GPU
   job rather than a 32-GPU gang. If no set of victims makes room, the job is skipped and
   nobody is preempted for it; less urgent jobs may still start in free GPUs (work
   conservation, as in Tiresias).

Jobs preempted in a round are not restarted in the same round, so a round never undoes
its own decisions.

Keys are cached: a job's key is computed when it enters the pending or the running set
and when `wake_at` re-ranks it, never per round. A pending and a running key are compared
through `victim_bound` (identity unless, as for SRTF, running keys are stored in another
form so that they stay constant while the job runs). Jobs sit in sorted lists (bisect),
the running ones also per node, so a round costs O(jobs it looks at), not O(queue).
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

from bench.sim.policy.base import Round
from bench.sim.policy.cluster import Cluster, Placement
from bench.sim.policy.jobs import Job

# A key is a tuple of comparable fields; `Any` because each policy picks its own.
Key = tuple[Any, ...]


class KeyedJobs:
    """Jobs kept sorted by (key, seq): O(log n) lookup, O(n) memmove insert/remove."""

    def __init__(self) -> None:
        self._order: list[tuple[Key, int]] = []
        self._entries: dict[int, tuple[Key, Job]] = {}

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, job: Job) -> bool:
        return job.seq in self._entries

    def add(self, job: Job, key: Key) -> None:
        assert job.seq not in self._entries, f"job {job.id} queued twice"
        bisect.insort(self._order, (key, job.seq))
        self._entries[job.seq] = (key, job)

    def remove(self, job: Job) -> None:
        key, _ = self._entries.pop(job.seq)
        del self._order[bisect.bisect_left(self._order, (key, job.seq))]

    def rekey(self, job: Job, key: Key) -> None:
        if self._entries[job.seq][0] != key:
            self.remove(job)
            self.add(job, key)

    def key(self, job: Job) -> Key:
        return self._entries[job.seq][0]

    def ascending(self) -> Iterator[tuple[Key, Job]]:
        """Most urgent first, over a snapshot (the set may change while iterating)."""
        entries = self._entries
        return ((key, entries[seq][1]) for key, seq in list(self._order))

    def descending(self) -> Iterator[tuple[Key, Job]]:
        """Least urgent first; must not be used while the set changes."""
        entries = self._entries
        return ((key, entries[seq][1]) for key, seq in reversed(self._order))

    def last_key(self) -> Key | None:
        return self._order[-1][0] if self._order else None


class PriorityPolicy(ABC):
    """Base of the priority policies; subclasses set the class flags and define the keys."""

    name = "priority"
    preemptive = False
    strict = False  # stop at the first job that does not fit (head-of-line blocking)

    def __init__(self) -> None:
        self.pending = KeyedJobs()
        self.running = KeyedJobs()
        self._placed: dict[int, Placement] = {}
        self._on_node: dict[int, KeyedJobs] = {}  # running jobs per node, for victim search

    # ---- what subclasses define ------------------------------------------------------
    @abstractmethod
    def pending_key(self, job: Job, now: float) -> Key:
        """Sort key of a pending job: the smallest key is considered first."""

    def running_key(self, job: Job, now: float) -> Key:
        return self.pending_key(job, now)

    def victim_bound(self, pending_key: Key, _now: float) -> Key:
        """The running key a pending job outranks: victims have keys strictly above it."""
        return pending_key

    def preemptible(self, _job: Job, _now: float) -> bool:
        return True

    def next_change(self, _job: Job, _now: float) -> float | None:
        return None

    # ---- the Policy protocol -----------------------------------------------------------
    def submit(self, job: Job, now: float) -> None:
        self.pending.add(job, self.pending_key(job, now))

    def wake_at(self, job: Job, now: float) -> float | None:
        if job in self.running:
            self._rekey_running(job, self.running_key(job, now))
        elif job in self.pending:
            self.pending.rekey(job, self.pending_key(job, now))
        else:
            return None
        return self.next_change(job, now)

    def finished(self, job: Job, _now: float) -> None:
        self._forget_running(job)

    def schedule(self, now: float, cluster: Cluster) -> Round:
        decided = Round()
        failed_gpus = cluster.total_gpus + 1  # smallest gang whose victim search failed
        for key, job in self.pending.ascending():
            bound = self.victim_bound(key, now) if self.preemptive else None
            last = self.running.last_key()
            may_preempt = bound is not None and last is not None and last > bound
            if cluster.free_total == 0 and not may_preempt:
                break  # nothing free, nobody to displace: less urgent jobs fare no better
            placement = cluster.place(job.gpus)
            if placement is None and may_preempt and job.gpus < failed_gpus:
                assert bound is not None
                victims = self._victims(job, bound, cluster, now)
                if victims is None:
                    failed_gpus = job.gpus
                else:
                    for victim in victims:
                        self._preempt(victim, cluster, now)
                        decided.preempted.append(victim)
                    failed_gpus = cluster.total_gpus + 1  # freed GPUs may help others
                    placement = cluster.place(job.gpus)
                    assert placement is not None, "victims were chosen to make room"
            if placement is None:
                if self.strict:
                    break
                continue
            self.start(job, placement, now)
            decided.started.append(job)
        return decided

    # ---- moving jobs between the sets ---------------------------------------------------
    def start(self, job: Job, placement: Placement, now: float) -> None:
        self.pending.remove(job)
        job.start(now, placement)
        key = self.running_key(job, now)
        self.running.add(job, key)
        self._placed[job.seq] = placement
        for piece in placement.slices:
            self._on_node.setdefault(piece.node, KeyedJobs()).add(job, key)

    def _preempt(self, job: Job, cluster: Cluster, now: float) -> None:
        self._forget_running(job)
        cluster.release(job.stop(now))
        job.preemptions += 1
        self.pending.add(job, self.pending_key(job, now))

    def _forget_running(self, job: Job) -> None:
        self.running.remove(job)
        for piece in self._placed.pop(job.seq).slices:
            self._on_node[piece.node].remove(job)

    def _rekey_running(self, job: Job, key: Key) -> None:
        self.running.rekey(job, key)
        for piece in self._placed[job.seq].slices:
            self._on_node[piece.node].rekey(job, key)

    # ---- victim search ------------------------------------------------------------------
    def _victims(self, job: Job, bound: Key, cluster: Cluster, now: float) -> list[Job] | None:
        """The cheapest running jobs to preempt so that `job` fits, or None."""
        per = cluster.gpus_per_node
        whole, rest = (0, job.gpus) if job.gpus <= per else divmod(job.gpus, per)
        chosen: dict[int, Job] = {}
        used: set[int] = set()
        for need, count in ((per, whole), (rest, 1 if rest else 0)):
            if count == 0:
                continue
            plans = []
            for node in range(cluster.nodes):
                if node not in used:
                    plan = self._plan(node, need, bound, cluster, now)
                    if plan is not None:
                        plans.append((sum(v.gpus for v in plan if v.seq not in chosen), node, plan))
            if len(plans) < count:
                return None
            plans.sort(key=lambda p: (p[0], p[1]))
            for _, node, plan in plans[:count]:
                used.add(node)
                chosen.update((v.seq, v) for v in plan)
        return list(chosen.values())

    def _plan(self, node: int, need: int, bound: Key, cluster: Cluster, now: float) -> list[Job] | None:
        """Least urgent victims on `node` that free `need` GPUs there, or None."""
        free = cluster.free_on(node)
        if free >= need:
            return []
        plan: list[Job] = []
        on_node = self._on_node.get(node)
        for key, victim in on_node.descending() if on_node else ():
            if not key > bound:
                break  # the rest of this node's jobs are at least as urgent
            if not self.preemptible(victim, now):
                continue
            plan.append(victim)
            free += sum(len(p.gpus) for p in self._placed[victim.seq].slices if p.node == node)
            if free >= need:
                return plan
        return None
