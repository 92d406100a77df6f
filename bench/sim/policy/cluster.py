"""The cluster model the policies reason over: nodes x GPUs, and gang placement.

A `Cluster` is an in-memory snapshot: for each node, the indices of its free GPUs. The
live scheduler builds one per cycle from its tables; the simulator keeps one for the
whole replay. Nothing here does I/O, and nothing is shared between threads.

Placement rules (the same for every policy, so policies differ only in *which* jobs run):

- A job of at most `gpus_per_node` GPUs goes on **one node**, the one with the fewest free
  GPUs that still fits it (best fit). Packing small jobs into already-busy nodes keeps
  whole nodes free for the big gangs that need them.
- A bigger job takes `gpus // gpus_per_node` **whole free nodes**, plus one best-fit node
  for the remainder when the size is not a multiple (e.g. 12 GPUs = one whole node and 4
  GPUs on the fullest node that has 4 free). That is the fewest nodes the job can span.
- If that is impossible the job does not start, even when enough GPUs are free in
  total: a gang spread over fragments would run at the speed of its slowest link, so
  we wait instead (consolidated placement).

To make best fit O(gpus_per_node) rather than O(nodes), nodes are kept in buckets by
their number of free GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Slice:
    """The GPUs a job holds on one node."""

    node: int
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Placement:
    """Where a gang runs: one slice per node it spans, all placed together."""

    slices: tuple[Slice, ...]

    @property
    def gpu_count(self) -> int:
        return sum(len(s.gpus) for s in self.slices)


class Cluster:
    """Free GPUs per node, with best-fit gang placement. Mutated only by `place`/`release`."""

    def __init__(self, nodes: int, gpus_per_node: int) -> None:
        if nodes < 1 or gpus_per_node < 1:
            raise ValueError(
                f"a cluster needs at least one node and one GPU per node, got {nodes}x{gpus_per_node}"
            )
        self.nodes = nodes
        self.gpus_per_node = gpus_per_node
        self.total_gpus = nodes * gpus_per_node
        self.free_total = self.total_gpus
        self._free: list[list[int]] = [list(range(gpus_per_node)) for _ in range(nodes)]
        # _by_free[k] = nodes with exactly k free GPUs.
        self._by_free: list[set[int]] = [set() for _ in range(gpus_per_node + 1)]
        self._by_free[gpus_per_node] = set(range(nodes))

    def free_on(self, node: int) -> int:
        return len(self._free[node])

    def free_gpus_on(self, node: int) -> tuple[int, ...]:
        return tuple(self._free[node])

    def _shape(self, gpus: int) -> tuple[int, int]:
        """(whole nodes, remainder GPUs on one more node) for a gang of `gpus`."""
        per = self.gpus_per_node
        if gpus <= per:
            return 0, gpus
        return gpus // per, gpus % per

    def _best_fit(self, gpus: int, exclude: set[int]) -> int | None:
        for k in range(gpus, self.gpus_per_node + 1):
            candidates = self._by_free[k] - exclude if exclude else self._by_free[k]
            if candidates:
                return min(candidates)
        return None

    def fits(self, gpus: int) -> bool:
        """Whether a gang of `gpus` could be placed now (no change to the cluster)."""
        if gpus > self.free_total:
            return False
        whole, rest = self._shape(gpus)
        if whole == 0:
            return self._best_fit(rest, set()) is not None
        empty = len(self._by_free[self.gpus_per_node])
        if empty < whole:
            return False
        if rest == 0:
            return True
        partial = any(self._by_free[k] for k in range(rest, self.gpus_per_node))
        return partial or empty > whole

    def place(self, gpus: int) -> Placement | None:
        """Place a gang of `gpus` whole, or return None and change nothing."""
        if gpus < 1:
            raise ValueError(f"a job needs at least one GPU, got {gpus}")
        if not self.fits(gpus):
            return None
        whole, rest = self._shape(gpus)
        chosen: list[tuple[int, int]] = []
        if whole:
            empty = sorted(self._by_free[self.gpus_per_node])[:whole]
            chosen.extend((node, self.gpus_per_node) for node in empty)
        if rest:
            node = self._best_fit(rest, {n for n, _ in chosen})
            assert node is not None  # fits() said so
            chosen.append((node, rest))
        return Placement(tuple(self._take(node, count) for node, count in chosen))

    def _take(self, node: int, count: int) -> Slice:
        free = self._free[node]
        self._by_free[len(free)].discard(node)
        taken, self._free[node] = tuple(free[:count]), free[count:]
        self._by_free[len(self._free[node])].add(node)
        self.free_total -= count
        return Slice(node, taken)

    def claim(self, placement: Placement) -> None:
        """Take exactly these GPUs: a placement decided elsewhere (the live planner's)."""
        for piece in placement.slices:
            free = self._free[piece.node]
            missing = set(piece.gpus) - set(free)
            if missing:
                raise ValueError(f"node {piece.node}: GPUs {sorted(missing)} are not free")
            self._by_free[len(free)].discard(piece.node)
            self._free[piece.node] = [g for g in free if g not in piece.gpus]
            self._by_free[len(self._free[piece.node])].add(piece.node)
            self.free_total -= len(piece.gpus)

    def release(self, placement: Placement) -> None:
        for piece in placement.slices:
            free = self._free[piece.node]
            overlap = set(piece.gpus) & set(free)
            if overlap or len(free) + len(piece.gpus) > self.gpus_per_node:
                raise ValueError(f"node {piece.node}: GPUs {sorted(overlap)} released twice")
            self._by_free[len(free)].discard(piece.node)
            free.extend(piece.gpus)
            free.sort()
            self._by_free[len(free)].add(piece.node)
            self.free_total += len(piece.gpus)
