"""The live scheduling policy: quotas, borrowing and reclaim, priority, fair share, backfill.

``plan`` takes one snapshot (pending and running jobs, ready nodes, virtual clusters) and
returns the cycle's decisions: placements, preemptions, and why every other job waits. Plain
code, no I/O, no clock; the live cycle (``cycle.py``), the dry-run answer and the
throughput benchmark all call it.

**Virtual clusters and quota.** Each VC has a guaranteed number of GPUs per GPU type. A job
whose VC has room for the whole job in its quota of a type is *guaranteed* there; a job
beyond its VC's quota may still run on idle GPUs as a *borrowed* (opportunistic) job. When
a guaranteed job does not fit, the planner takes GPUs back from borrowed jobs (*reclaim*,
at once, whatever their priority: that is the promise that a VC never waits longer than
on a private cluster of its quota size, as HiveD makes it). Quotas that add up to more
than the cluster has break that promise; the API warns when they do.

**Order.** Guaranteed candidates first, then the others; within each, higher priority
first, then *least attained service* (below), then the user with the fewest GPUs in use
in the VC (fair share between a VC's users: the instantaneous dominant share, GPUs being
the one scarce resource), then submission order. Borrowers are also ordered by how much
their VC already borrows, so idle capacity is shared across VCs instead of going to the
one with the longest queue.

**Least attained service** (Tiresias; duration-blind: what a job has run, never what it
will). A job's service level is how many GPU-second thresholds its attained service (all
its runs) has passed, x4 from 900 GPU-s. Within a priority, lower levels go first, and a
job may preempt jobs of its own VC (or borrowed ones) of its priority at a higher level
once they ran ``min_runtime_s`` (highest level first; within a level, gangs too wide to
be promoted last): short and new jobs overtake long ones without anyone saying how long
a job is. Least attained service alone starves long jobs, so a
*starvation guard* (``levels.py``) promotes jobs pending ``starve_after_s`` (all their
waits; the live cycle makes it load-aware, ``starvation.py``), longest wait first, while
the promoted ones hold at most half the cluster's GPUs, above every job of their
priority: a promoted job may preempt any that is not promoted, and once placed (its
allocation says so) is never preempted for service; jobs wider than a quarter of the
cluster are never promoted.
``bench.simulate --policy corral`` replays the production traces through this very
function (``bench/sim/policy/corral.py``).

**Preemption**, always of the cheapest victims (borrowed first, then lowest priority, then
least progress lost), and never of more jobs than the gang needs:
- a guaranteed job reclaims borrowed GPUs (no minimum runtime: the quota is the owner's);
- a job over its VC's quota may preempt its own VC's lower-priority guaranteed jobs that
  ran at least ``min_runtime_s`` (priority inside a VC);
- any job may preempt *borrowed* jobs of lower priority that ran at least ``min_runtime_s``;
- a job that the free GPUs could hold, but no one node's, has small borrowed jobs of at
  most its priority *moved* off the node closest to having room, when the other nodes'
  free GPUs can take them all (``moves.py``): they restart there next cycle. Tried before
  preempting for service, since a move leaves nobody waiting.
Jobs already being preempted count as free GPUs for the job that asked, so a slow stop
does not add victims cycle after cycle.

**Service replicas** (``kind: service``) never borrow (they wait, ``WaitingForQuota``),
so no reclaim needs them; which jobs may stop one is ``victims.protected``.

**Backfill with a reservation** (EASY): the first job that waits for capacity — once it
has waited ``reserve_after_s``; before, jobs behind it that fit simply go ahead — gets a
reservation on the nodes that will hold it soonest (running jobs are assumed to end at
their ``max_runtime_s``; those without one, oldest first, last). GPUs free on those nodes
now are withheld from every job behind it, except jobs whose own ``max_runtime_s`` ends
before the reservation's start: smaller jobs go ahead only when they cannot delay it.

**Images**: a job whose tasks name an image (and that does not allow host execution) is
placed only on nodes that run images (``images.py``); other jobs never pay for the check.

**Why pending**: every job left waiting gets one reason from a closed set, its position
in the order above, and, when the running jobs' limits allow it, an estimated start
(``estimate.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from services.scheduler.estimate import estimate_starts
from services.scheduler.images import ImageNodes, place_image_job
from services.scheduler.levels import PROMOTED, service_levels
from services.scheduler.model import (
    ANY_TYPE,
    Decision,
    InstancePlacement,
    NodeCapacity,
    PendingJob,
    PendingReason,
    Plan,
    PlanSettings,
    Preemption,
    RunningJob,
    VirtualCluster,
    Waiting,
)
from services.scheduler.node_index import NodeIndex
from services.scheduler.placement import place_gang, type_order
from services.scheduler.reasons import no_shared_pool, share_shortage, why_waiting
from services.scheduler.reservation import Reservation, find_reservation
from services.scheduler.stranding import WorkloadMix
from services.scheduler.tally import Tally
from services.scheduler.victims import Candidate, VictimFinder


def plan(
    pending: Sequence[PendingJob],
    nodes: Mapping[str, NodeCapacity] | Iterable[NodeCapacity],
    *,
    running: Sequence[RunningJob] = (),
    vcs: Mapping[str, VirtualCluster] | None = None,
    largest_unready_node: int = 0,
    settings: PlanSettings | None = None,
) -> Plan:
    """Decide one cycle. ``pending`` comes in submission order; ``nodes`` are the ready ones
    (their ``free_gpus`` are updated to what is left); ``largest_unready_node``: the most
    GPUs on a registered node that is drained or unreachable."""
    node_list = list(nodes.values()) if isinstance(nodes, Mapping) else list(nodes)
    return _Planner(
        pending, node_list, running, vcs or {}, largest_unready_node, settings or PlanSettings()
    ).run()


def decide(pending: Sequence[PendingJob], nodes: Mapping[str, NodeCapacity]) -> list[Decision]:
    return plan(pending, nodes).decisions


class _Planner:
    def __init__(
        self,
        pending: Sequence[PendingJob],
        nodes: list[NodeCapacity],
        running: Sequence[RunningJob],
        vcs: Mapping[str, VirtualCluster],
        largest_unready: int,
        settings: PlanSettings,
    ) -> None:
        self.pending = pending
        self.index = NodeIndex(nodes, WorkloadMix.of(pending, running))  # the asks: stranding.py
        self.running = running
        self.vcs = vcs
        self.largest_unready = largest_unready
        self.settings = settings
        self.result = Plan()
        self.tally = Tally.of(running)
        self.cluster_gpus = sum(node.total_gpus for node in nodes if node.total_gpus > 0)
        self.victims = VictimFinder(self.index, running, settings, self.cluster_gpus)
        self.image_nodes = ImageNodes(nodes)
        # Gang shapes that found no place and no victims this cycle: the same shape cannot
        # fare better later in the cycle (GPUs are only taken, searches only used up),
        # so the next job of that shape goes straight to its reason.
        self.hopeless: set[tuple[object, ...]] = set()
        self.free_at_start = {kind: self.index.free(kind) for kind in self.index.types()}
        self.reservation: Reservation | None = None
        # Bumped whenever the cycle changes what an explanation reads (a placement, a
        # preemption, a reservation): between two bumps, jobs of one shape wait for the
        # same reason in the same words, so thousands of waiting jobs cost a few
        # explanations, not one each (only their positions differ).
        self.version = 0
        self._explained: dict[tuple[object, ...], tuple[PendingReason, str]] = {}
        self._explained_at = 0  # the version the memo holds answers for
        self._guaranteed: dict[tuple[str, str | None, float], list[str]] = {}  # as _explained
        self._guaranteed_at = 0
        self._levels = service_levels(pending, running, settings, self.cluster_gpus)  # see level_of
        # By GPU type: the fewest GPUs a job left waiting for that type's capacity asks.
        # A job behind it asking as many or more waits for Priority (reasons.py).
        self._queued_need: dict[str, float] = {}

    # --- quota ------------------------------------------------------------------------

    def quota(self, vc: str, gpu_type: str) -> int:
        cluster = self.vcs.get(vc)
        return cluster.quota.get(gpu_type, 0) if cluster else 0

    def headroom(self, job: PendingJob, gpu_type: str) -> float:
        # Rounded to the thousandths shares are counted in, so that float dust never makes
        # a share that fits the quota exactly seem not to.
        return round(self.quota(job.vc, gpu_type) - self.tally.guaranteed.get((job.vc, gpu_type), 0), 3)

    def candidate_types(self, job: PendingJob) -> list[str]:
        return [job.gpu_type] if job.gpu_type is not None else self.index.types()

    def guaranteed_types(self, job: PendingJob) -> list[str]:
        """Types on which the whole job fits in its VC's remaining quota, most room first
        (memoised until the tally next changes, which bumps ``version``)."""
        if self._guaranteed_at != self.version:
            self._guaranteed, self._guaranteed_at = {}, self.version
        key = (job.vc, job.gpu_type, job.gpus)
        types = self._guaranteed.get(key)
        if types is None:
            types = [t for t in self.candidate_types(job) if self.headroom(job, t) >= job.gpus]
            if len(types) > 1:
                types.sort(key=lambda t: -self.headroom(job, t))
            self._guaranteed[key] = types
        return types

    def has_quota(self, job: PendingJob) -> bool:
        return any(self.quota(job.vc, t) > 0 for t in self.candidate_types(job))

    def level_of(self, job: PendingJob) -> int:
        """Its service level (least attained service), or -1 when the starvation guard
        promoted it: it then ranks before, and may preempt, every job of its priority.
        Fixed for the cycle: worked out for every pending job at once (levels.py)."""
        return self._levels[job.job_id]

    # --- the cycle --------------------------------------------------------------------

    def ordered(self) -> list[PendingJob]:
        within_quota: dict[tuple[str, str | None, float], bool] = {}  # by what decides it

        level = self._levels
        per_user, borrowed = self.tally.per_user, self.tally.borrowed

        # No submission-order term: ``pending`` comes in submission order and the sort is
        # stable, so jobs alike in every term below keep that order.
        def key(job: PendingJob) -> tuple[int, float, int, int, float]:
            kind = (job.vc, job.gpu_type, job.gpus)
            fits = within_quota.get(kind)
            if fits is None:
                fits = within_quota[kind] = job.gpus == 0 or any(
                    self.headroom(job, t) >= job.gpus for t in self.candidate_types(job)
                )
            return (
                0 if fits else 1,
                0 if fits else borrowed.get(job.vc, 0),
                -job.priority,
                level[job.job_id],
                per_user.get((job.vc, job.user), 0),
            )

        return sorted(self.pending, key=key)

    def run(self) -> Plan:
        left: list[tuple[PendingJob, PendingReason, str]] = []
        schedule = self.schedule
        for job in self.ordered():
            reason = schedule(job)
            if reason is not None:
                left.append((job, reason[0], reason[1]))
        starts = estimate_starts(
            left,
            self.running,
            {kind: self.index.free(kind) for kind in self.index.types()},
            self.reservation.job_id if self.reservation else None,
            self.reservation.start_s if self.reservation else math.inf,
        )
        self.result.waiting = [
            Waiting(job.job_id, reason, detail, position, start)
            for position, ((job, reason, detail), start) in enumerate(zip(left, starts, strict=True), start=1)
        ]
        return self.result

    def schedule(self, job: PendingJob) -> tuple[PendingReason, str] | None:
        """Place, preempt for, or explain one job; None when it was placed."""
        cluster = self.vcs.get(job.vc)
        limit = cluster.max_gpus_per_user if cluster else None
        if limit is not None and job.gpus:
            in_use = self.tally.per_user.get((job.vc, job.user), 0)
            if round(in_use + job.gpus, 3) > limit:
                return "UserLimit", (
                    f"user {job.user} holds {in_use:g} GPUs in virtual cluster {job.vc}, whose limit per"
                    f" user is {limit}; this job needs {job.gpus:g} more"
                )
        if job.needs_image_runtime and not self.image_nodes.everywhere:
            return place_image_job(
                job,
                self.index,
                self.image_nodes,
                lambda gpu_type, borrowed: self.try_place(job, gpu_type, borrowed=borrowed),
                self.guaranteed_types(job) if job.gpus else [],
                self.candidate_types(job),
            )
        if job.gpus == 0:
            if self.try_place(job, "", borrowed=False):
                return None
            return "InsufficientGPUs", "no ready node to run it on"
        guaranteed = self.guaranteed_types(job)
        shape = self.shape_of(job, bool(guaranteed))
        if shape in self.hopeless:
            return self.explain(job, guaranteed, shape)  # most of a busy queue: the memo's answer
        reason = self.place_or_preempt(job, self.candidate_types(job), guaranteed, shape)
        if reason is None or reason[0] == "WaitingForPreemption":
            return reason
        self.hopeless.add(shape)
        return reason

    def shape_of(self, job: PendingJob, guaranteed: bool) -> tuple[object, ...]:
        """What decides whether a job can be placed or preempt for: two jobs of one shape
        fare alike in a cycle (the user matters only for the per-user limit, checked first)."""
        reservation = self.reservation
        backfill = (
            reservation is not None
            and job.max_runtime_s is not None
            and job.max_runtime_s <= reservation.start_s
        )
        service = self.level_of(job)  # decides its victims
        return (job.asks, service, guaranteed, backfill)

    def place_or_preempt(
        self, job: PendingJob, types: list[str], guaranteed: list[str], shape: tuple[object, ...]
    ) -> tuple[PendingReason, str] | None:
        for gpu_type in guaranteed:
            if self.try_place(job, gpu_type, borrowed=False):
                return None
        for gpu_type in guaranteed:
            victims = self.victims.find(job, gpu_type, "reclaim")
            if victims is not None:
                return self.preempt_for(job, victims, "reclaimed for a job within its VC's quota")
        if not guaranteed:
            for gpu_type in types:
                if self.quota(job.vc, gpu_type) >= job.gpus:
                    gap = job.gpus - self.headroom(job, gpu_type)
                    victims = self.victims.find(job, gpu_type, "own_vc", quota_gap=gap)
                    if victims is not None:
                        return self.preempt_for(job, victims, "preempted for a higher-priority job of its VC")
        if job.service:
            # A replica never borrows (nor backfills, nor moves or preempts others into a
            # borrowed place): what it holds, no owner ever needs to take back.
            return self.explain(job, guaranteed, shape)
        if job.gpu_type is None:
            types = type_order(job, self.index, types)  # borrowing: where it fits best first
        for gpu_type in types:
            if self.try_place(job, gpu_type, borrowed=True):
                return None
            backfill = self.reservation is not None
            if backfill and self.fits_before_reservation(job, gpu_type, borrowed=gpu_type not in guaranteed):
                return None
        for gpu_type in types:
            victims = self.victims.find(job, gpu_type, "priority")
            if victims is not None:
                return self.preempt_for(job, victims, "preempted for a higher-priority job")
        if self.settings.move_to_defragment:  # before service: a move stops nobody for long
            for gpu_type in types:
                victims = self.victims.find(job, gpu_type, "move")
                if victims is not None:
                    return self.preempt_for(job, victims, "moved to another node to make room for a job")
        if self.settings.preempt_for_service:
            for gpu_type in types:
                victims = self.victims.find(job, gpu_type, "service", level=self.level_of(job))
                if victims is not None:
                    return self.preempt_for(job, victims, "preempted for a job with less attained service")
        return self.explain(job, guaranteed, shape)

    def try_place(self, job: PendingJob, gpu_type: str, *, borrowed: bool) -> bool:
        placements = place_gang(job, self.index, gpu_type)
        if placements is None:
            return False
        self.commit(job, gpu_type, placements, borrowed)
        return True

    def commit(
        self, job: PendingJob, gpu_type: str, placements: list[InstancePlacement], borrowed: bool
    ) -> None:
        promoted = self._levels.get(job.job_id) == PROMOTED
        self.result.decisions.append(Decision(job, placements, borrowed and job.gpus > 0, promoted))
        self.version += 1
        self.tally.add(job.vc, job.user, gpu_type, job.gpus, borrowed and job.gpus > 0)

    # --- backfill ---------------------------------------------------------------------

    def fits_before_reservation(self, job: PendingJob, gpu_type: str, *, borrowed: bool) -> bool:
        """EASY backfill: a job whose limit ends before the reserved job's start may use the
        reserved GPUs; place it there if it fits."""
        reservation = self.reservation
        assert reservation is not None
        if job.max_runtime_s is None or not math.isfinite(reservation.start_s):
            return False  # nothing says it would end before the reserved job can start
        if (
            job.max_runtime_s > reservation.start_s
            or self.index.free(gpu_type) + reservation.held() < job.gpus
        ):
            return False
        for node_id, gpus in reservation.gpus.items():
            self.index.give(node_id, gpus)
        placed = self.try_place(job, gpu_type, borrowed=borrowed)
        for node_id, gpus in reservation.gpus.items():
            still_free = [g for g in gpus if g in self.index.nodes[node_id].free_gpus]
            self.index.take_exact(node_id, still_free)
            reservation.gpus[node_id] = still_free
        return placed

    def reserve(self, job: PendingJob, gpu_type: str) -> None:
        """Withhold the free GPUs of the nodes that will hold ``job`` soonest (reservation.py)."""
        self.reservation = find_reservation(
            job, gpu_type, self.index, self.victims.running_on.get(gpu_type, []), self.victims.claimed
        )
        if self.reservation is not None:
            self.version += 1

    # --- preemption -------------------------------------------------------------------

    def preempt_for(self, job: PendingJob, victims: list[Candidate], why: str) -> tuple[PendingReason, str]:
        self.version += 1  # victims claimed, the placement's free GPUs held for the job
        names = []
        for victim in victims:
            self.victims.claimed.add(victim.job.job_id)
            names.append(victim.job.job_id)
            if not victim.free_already:
                self.result.preemptions.append(
                    Preemption(victim.job.job_id, f"{why} ({job.job_id}, VC {job.vc})", job.job_id)
                )
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        return "WaitingForPreemption", f"GPUs are being freed for it: stopping {shown}"

    # --- why it waits -----------------------------------------------------------------

    def explain(
        self, job: PendingJob, guaranteed: list[str], shape: tuple[object, ...]
    ) -> tuple[PendingReason, str]:
        """Why a job that was neither placed nor given victims waits (memoised by shape
        until the cycle next changes the state; see ``version``: until then the shape also
        says which types are ``guaranteed``, from what the job asks)."""
        key = shape
        cached = self._explained.get(key) if self._explained_at == self.version else None
        if cached is not None:
            return cached
        if self._explained_at != self.version:
            self._explained = {}
            self._explained_at = self.version
        answer = self._explain(job, guaranteed)
        if self._explained_at == self.version:  # explaining it reserved nothing
            self._explained[key] = answer
        return answer

    def _explain(self, job: PendingJob, guaranteed: list[str]) -> tuple[PendingReason, str]:
        types = [t for t in self.candidate_types(job) if self.index.largest(t)]
        if not types:
            kind = f" of type {job.gpu_type}" if job.gpu_type else ""
            if max(job.widest, int(job.shares)) <= self.largest_unready:  # (a share needs one GPU)
                return (
                    "NodesUnhealthy",
                    f"no ready node has GPUs{kind}; some nodes are drained or unreachable",
                )
            return "GangDoesNotFit", f"no ready node has GPUs{kind}"
        if job.shares:
            return self._explain_share(job, guaranteed, types)
        gpu_type = guaranteed[0] if guaranteed else max(types, key=lambda t: self.index.free(t))
        reason, detail = why_waiting(
            job,
            self.index.free(gpu_type),
            self.free_at_start.get(gpu_type, 0),
            self.index.largest(gpu_type) if job.gpu_type else self.index.largest(),
            self.largest_unready,
            queued_ahead=self._queued_need.get(gpu_type, math.inf) <= job.gpus,
        )
        if reason in ("GangDoesNotFit", "NodesUnhealthy"):
            return reason, detail
        if not guaranteed and (job.service or self.has_quota(job)):
            return self._over_quota(job, gpu_type, detail)
        self._queue_for(gpu_type, job.gpus)
        if self.reservation is None:
            if job.waited_s >= self.settings.reserve_after_s:
                self.reserve(job, gpu_type)
        elif reason != "Priority" and self.index.free(gpu_type) + self.reservation.held() >= job.gpus:
            return "Priority", (
                f"GPUs it could use are reserved for {self.reservation.job_id}, ahead of it in the queue"
            )
        return reason, detail

    def _explain_share(
        self, job: PendingJob, guaranteed: list[str], types: list[str]
    ) -> tuple[PendingReason, str]:
        """Why a job asking for a share of a GPU waits: no pool shares its GPUs, its VC's
        quota, or no shared GPU with room (shares take no reservation: any ending share
        makes room for the next)."""
        sharing = [t for t in types if self.index.shares_gpus(t)]
        if not sharing:
            return "InsufficientGPUs", no_shared_pool(job)
        gpu_type = guaranteed[0] if guaranteed and guaranteed[0] in sharing else sharing[0]
        detail = share_shortage(job)
        if not guaranteed and (job.service or self.has_quota(job)):
            return self._over_quota(job, gpu_type, detail)
        return "InsufficientGPUs", detail

    def _over_quota(self, job: PendingJob, gpu_type: str, detail: str) -> tuple[PendingReason, str]:
        used = self.tally.guaranteed.get((job.vc, gpu_type), 0)
        borrowing = f"no idle GPUs can be borrowed ({detail})"
        why = "a service replica never borrows" if job.service else borrowing
        return "WaitingForQuota", (
            f"virtual cluster {job.vc} uses {used:g} of its {self.quota(job.vc, gpu_type)} guaranteed"
            f" {gpu_type or 'GPUs'}; this job needs {job.gpus:g} and {why}"
        )

    def _queue_for(self, gpu_type: str, gpus: float) -> None:
        """A job now waits for GPUs of the type: jobs behind it that ask as many wait for
        Priority. Explanations read this, so a change bumps ``version``."""
        if gpus < self._queued_need.get(gpu_type, math.inf):
            self._queued_need[gpu_type] = gpus
            self.version += 1


__all__ = ["ANY_TYPE", "PlanSettings", "decide", "plan", "why_waiting"]
