"""Fragmentation of a node against a workload's pod mix, and FGD, which places to grow it least.

The measure (Weng et al., ATC '23, as their simulator computes it): for a node and a pod
shape, the idle GPU capacity that such a pod could not use — all of it when the pod asks
for no GPU or does not fit the node (its CPU, or not enough GPUs with its share free),
otherwise the thousandths left on GPUs with less free than the pod's share. A node's
fragmentation is that amount averaged over the *workload mix*: the pod shapes (CPU, GPU
count, share) of the list, most popular first, up to the shapes that cover 95 % of the pods
(CPU-only pods included), weighted by their counts. Memory is not part of it, as in the
simulator (its node record has none).

FGD scores a node by how much the pod would change that node's fragmentation, trying each
GPU a share could go to, and picks the best: the node where fragmentation grows least.
Like the simulator, the score handed to the scheduler is ``int(100 * sigmoid(gain / 1000))``
(gain = fragmentation before - after, in thousandths of a GPU), and equal scores go to the
node first in an order drawn once per replay (``cluster.select_host``); the share then goes
to the first GPU with the best score. The rounding matters: it makes many nodes tie, and a
fixed tie order then packs pods onto the same nodes. ``exact=True`` ranks by the gain
itself instead, and allocates visibly less.

Speed: a node's fragmentation depends only on its CPU left and the multiset of what is left
on its GPUs, its *state* ``(cpu left, GPU lefts sorted)``; the fragmentation of a state and
the best gain of a pod shape on it are memoised for every replay of the list
(``FragmentationMemo``), and each replay keeps a node x shape table of scores, refreshed
only for the nodes written since (``Fgd``). Unseen states are measured in one vector pass.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bench.packing.cluster import MAX_GPUS, Cluster, Ints, Placement, select_host
from bench.packing.trace import Pod

Floats = npt.NDArray[np.float64]
State = tuple[int, ...]  # CPU left, then the thousandths left on each GPU, most first, padded to 8
POPULARITY = 0.95  # the simulator's ``podPopularityThreshold``


@dataclass(frozen=True)
class WorkloadMix:
    """Pod shapes and their weights (summing to 1): what fragmentation is measured against."""

    cpu_milli: Ints
    num_gpu: Ints
    gpu_milli: Ints
    weight: Floats


def workload_mix(pods: Sequence[Pod], popularity: float = POPULARITY) -> WorkloadMix:
    """The commonest shapes of the list until they cover ``popularity`` of its pods; ties in
    count go to the larger shape (CPU, then share, then GPU count), as the simulator sorts."""
    counts = Counter((pod.cpu_milli, pod.gpu_milli, pod.num_gpu) for pod in pods)
    ranked = sorted(counts.items(), key=lambda item: (item[1], item[0]), reverse=True)
    chosen: list[tuple[tuple[int, int, int], int]] = []
    covered = 0
    for shape, count in ranked:
        if covered >= popularity * len(pods):
            break
        chosen.append((shape, count))
        covered += count
    return WorkloadMix(
        cpu_milli=np.array([s[0] for s, _ in chosen], dtype=np.int64),
        gpu_milli=np.array([s[1] for s, _ in chosen], dtype=np.int64),
        num_gpu=np.array([s[2] for s, _ in chosen], dtype=np.int64),
        weight=np.array([c / covered for _, c in chosen], dtype=np.float64),
    )


def fragmentation(cpu_left: Ints, gpu_left: Ints, mix: WorkloadMix) -> Floats:
    """Expected unusable GPU thousandths of each node (rows of ``gpu_left``) under the mix."""
    fits = gpu_left[:, :, None] >= mix.gpu_milli[None, None, :]  # node, GPU, shape
    hosts = fits.sum(axis=1) >= mix.num_gpu[None, :]
    usable = hosts & (cpu_left[:, None] >= mix.cpu_milli[None, :]) & (mix.gpu_milli > 0)[None, :]
    stranded = (gpu_left[:, :, None] * ~fits).sum(axis=1)  # on GPUs too full for the shape
    idle = gpu_left.sum(axis=1)[:, None]
    # A row-wise sum rather than a matrix product: BLAS may add in an order that depends on
    # how many rows there are, and equal nodes must come out exactly equal to tie.
    return np.asarray((np.where(usable, stranded, idle) * mix.weight[None, :]).sum(axis=1), dtype=np.float64)


def fgd_score(gain: Floats | float) -> Floats:
    """The simulator's integer node score for a fragmentation gain (0-100, higher is better)."""
    return np.trunc(100.0 / (1.0 + np.exp(-np.asarray(gain, dtype=np.float64) / 1000.0)))


def _after(state: State, pod: Pod) -> list[State]:
    """The states the pod can leave ``state`` in: one per distinct GPU a share could go to."""
    cpu, lefts = state[0] - pod.cpu_milli, state[1:]
    if pod.fractional:
        options = []
        for value in sorted(set(lefts), reverse=True):
            if value >= pod.gpu_milli:
                at = lefts.index(value)
                changed = (*lefts[:at], value - pod.gpu_milli, *lefts[at + 1 :])
                options.append((cpu, *sorted(changed, reverse=True)))
        return options
    if pod.num_gpu:
        # Whole GPUs are the first ``num_gpu`` entries (sorted, the free ones lead).
        return [(cpu, *sorted((0,) * pod.num_gpu + lefts[pod.num_gpu :], reverse=True))]
    return [(cpu, *lefts)]


class FragmentationMemo:
    """Fragmentation per node state, and the best gain per (node state, pod shape).

    Valid for one workload mix; shared by every replay of the list it was built from, so
    later seeds mostly find what earlier ones worked out. A state's CPU is kept exact for
    gains (the pod's CPU comes off it) but rounded down to the mix's CPU asks for the
    fragmentation itself, which only compares it with them: far fewer states to measure."""

    def __init__(self, mix: WorkloadMix) -> None:
        self.mix = mix
        self.cpu_steps = sorted({int(c) for c, g in zip(mix.cpu_milli, mix.gpu_milli, strict=True) if g})
        self.frag: dict[State, float] = {}
        self.gains: dict[tuple[int, int, int], dict[State, float]] = {}  # by pod shape

    def _canonical(self, state: State) -> State:
        at = bisect.bisect_right(self.cpu_steps, state[0])
        return (self.cpu_steps[at - 1] if at else -1, *state[1:])

    def measure(self, states: Sequence[State]) -> list[float]:
        """Fragmentation of each state, working out the unseen ones in one vector pass."""
        keys = [self._canonical(state) for state in states]
        todo = list({key: None for key in keys if key not in self.frag})
        if todo:
            rows = np.array(todo, dtype=np.int64)
            for key, value in zip(todo, fragmentation(rows[:, 0], rows[:, 1:], self.mix), strict=True):
                self.frag[key] = float(value)
        return [self.frag[key] for key in keys]

    def best_gains(self, states: Sequence[State], pod: Pod) -> list[float]:
        """For each state, the most the pod can lower its fragmentation (negative: it grows)."""
        gains = self.gains.setdefault((pod.cpu_milli, pod.num_gpu, pod.gpu_milli), {})
        todo = list({state: None for state in states if state not in gains})
        if todo:
            options = [_after(state, pod) for state in todo]
            frags = iter(self.measure([*todo, *(after for group in options for after in group)]))
            befores = [next(frags) for _ in todo]
            for state, before, group in zip(todo, befores, options, strict=True):
                # Rounded so that gains equal but for float noise tie, whatever order they were added in.
                gains[state] = round(before - min(next(frags) for _ in group), 6)
        return [gains[state] for state in states]


def node_state(cluster: Cluster, row: int) -> State:
    lefts = sorted(cluster.gpu_left[row].tolist(), reverse=True)
    return (int(cluster.cpu_left[row]), *lefts)


class Fgd:
    """FGD over one replay's cluster; the memo may be shared with other replays of the list.

    Per node and pod shape it keeps the score until the node next changes (the replay
    counts writes per node), so a pod costs a gather over the feasible nodes plus the
    nodes written since its shape was last placed."""

    def __init__(self, memo: FragmentationMemo, exact: bool = False) -> None:
        self.memo = memo
        self.exact = exact
        self.shapes: dict[tuple[int, int, int], int] = {}
        self.states: list[State] = []
        self.seen: Ints = np.zeros(0, dtype=np.int64)
        self.scores: Floats = np.zeros((0, 0))  # node, shape; NaN until worked out

    def _refresh(self, cluster: Cluster, pod: Pod) -> int:
        """Forget the scores of nodes written since the last pod; the pod's shape column."""
        if len(self.seen) != len(cluster.nodes):
            self.states = [node_state(cluster, row) for row in range(len(cluster.nodes))]
            self.seen = cluster.writes.copy()
            self.scores = np.full((len(cluster.nodes), 16), np.nan)
        for row in np.flatnonzero(cluster.writes != self.seen).tolist():
            self.states[row] = node_state(cluster, row)
            self.seen[row] = cluster.writes[row]
            self.scores[row] = np.nan
        shape = self.shapes.setdefault((pod.cpu_milli, pod.num_gpu, pod.gpu_milli), len(self.shapes))
        if shape >= self.scores.shape[1]:
            self.scores = np.hstack([self.scores, np.full(self.scores.shape, np.nan)])
        return shape

    def __call__(self, cluster: Cluster, pod: Pod, tie_rank: Ints) -> Placement | None:
        rows = cluster.feasible(pod)
        if not rows.size:
            return None
        shape = self._refresh(cluster, pod)
        scores = self.scores[rows, shape]
        missing = rows[np.isnan(scores)]
        if missing.size:
            gains = np.array(self.memo.best_gains([self.states[r] for r in missing.tolist()], pod))
            self.scores[missing, shape] = gains if self.exact else fgd_score(gains)
            scores = self.scores[rows, shape]
        row = select_host(rows, scores, tie_rank)
        return Placement(row, self._gpus(cluster, row, pod))

    def _gpus(self, cluster: Cluster, row: int, pod: Pod) -> tuple[int, ...]:
        if not pod.fractional:
            return cluster.lowest_whole(row, pod.num_gpu)
        # The first GPU (by index) where the share scores best, as the simulator picks it.
        state = self.states[row]
        candidates = [gpu for gpu in range(MAX_GPUS) if cluster.gpu_left[row, gpu] >= pod.gpu_milli]
        afters = []
        for gpu in candidates:
            lefts = list(state[1:])
            left = int(cluster.gpu_left[row, gpu])
            lefts[lefts.index(left)] = left - pod.gpu_milli
            afters.append((state[0] - pod.cpu_milli, *sorted(lefts, reverse=True)))
        before, *after = self.memo.measure([state, *afters])
        gains = np.array([round(before - value, 6) for value in after])
        scores = gains if self.exact else fgd_score(gains)
        return (candidates[int(np.argmax(scores))],)
