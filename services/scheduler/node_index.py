"""Free GPUs of the ready nodes, indexed for best fit: the ledger placement reads and changes.

``NodeIndex`` keeps the free GPUs of the ready nodes in buckets by (GPU type, number of free
GPUs), so best fit costs O(GPUs per node) rather than O(nodes) (plus at most
``MAX_STRANDING_LOOKS`` candidates weighed where placements strand, below): the live cycle
and the throughput benchmark place thousands of jobs on 5,000 nodes. Buckets are
insertion-ordered dicts used as ordered sets, so ties always resolve the same way for the
same snapshot.

Shares (fractions of one GPU) are counted in thousandths (``SHARE_UNITS``). The GPUs of
sharing nodes that hold shares are bucketed by the thousandths still free on them, and the
sharing nodes by their free whole GPUs, so that finding a place for a share costs a walk
over at most a thousand buckets, not over the nodes.

Every walk goes in best-fit order and weighs what each candidate would strand against the
workload mix (``stranding.py``): the first candidate that strands nothing wins, else the one
that strands least (best fit between those that strand about as much). Without a mix, or
where nothing is stranded, that is plain best fit at plain best fit's cost.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Iterator
from operator import attrgetter

from services.scheduler.model import NodeCapacity
from services.scheduler.stranding import (
    MAX_STRANDING_LOOKS,
    SHARE_UNITS,
    WorkloadMix,
    share_strands,
    whole_strands,
)

# A fit: (stranding class, tightness, node); lower is better on both. Tightness is the free
# GPUs of the node for whole GPUs; for a share, the room of the shared GPU it goes to, or
# SHARE_UNITS + the node's free GPUs for a fresh GPU.
Fit = tuple[int, int, str]

__all__ = ["SHARE_UNITS", "Fit", "NodeIndex", "has_room", "nvlink_choice"]


class NodeIndex:
    """Free GPUs of the ready nodes, bucketed by (type, free count)."""

    def __init__(self, nodes: Iterable[NodeCapacity], mix: WorkloadMix | None = None) -> None:
        self.nodes: dict[str, NodeCapacity] = {}
        self.mix = mix if mix is not None else WorkloadMix()
        self._buckets: dict[str, list[dict[str, None]]] = {}  # by type
        self._free: dict[str, int] = {}
        self._largest: dict[str, int] = {}
        # By (type, rack), for gangs kept in one rack: built for a type when first asked
        # (``_index_racks``), since most gangs fit on one node and most clusters of a type
        # are one rack; kept up to date from then on.
        self._racks: dict[str, list[str]] = {}
        self._rack_buckets: dict[tuple[str, str], list[dict[str, None]]] = {}
        self._rack_free: dict[tuple[str, str], int] = {}
        self._rack_indexed: set[str] = set()  # the types whose buckets by rack are built
        # Shares: by type, the GPUs of sharing nodes that hold shares, bucketed by the
        # thousandths still free on them, and the sharing nodes bucketed by free whole GPUs
        # (where a fresh GPU is opened for a share).
        self._share_room: dict[str, list[dict[tuple[str, int], None]]] = {}
        self._sharing: dict[str, list[dict[str, None]]] = {}
        # Built for every cycle over every ready node (thousands): hence the locals.
        all_nodes, buckets_of, free_of, largest = self.nodes, self._buckets, self._free, self._largest
        for node in sorted(nodes, key=attrgetter("node_id")):
            node_id = node.node_id
            all_nodes[node_id] = node
            total = node.total_gpus
            if total <= 0:
                continue
            kind, free = node.gpu_type, len(node.free_gpus)
            buckets = buckets_of.get(kind)
            if buckets is None:
                buckets = buckets_of[kind] = []
                free_of[kind], largest[kind] = 0, 0
            while len(buckets) <= total or len(buckets) <= free:
                buckets.append({})
            buckets[free][node_id] = None
            free_of[kind] += free
            if total > largest[kind]:
                largest[kind] = total
            if node.sharing:
                self._index_sharing(node)
        self._types = sorted(self._buckets, key=lambda kind: (-self._free[kind], kind))

    def _index_sharing(self, node: NodeCapacity) -> None:
        sharing = self._sharing.setdefault(node.gpu_type, [])
        while len(sharing) <= len(node.free_gpus):
            sharing.append({})
        sharing[len(node.free_gpus)][node.node_id] = None
        for gpu, used in node.shares.items():
            self._room_add(node, gpu, used)

    def _room_add(self, node: NodeCapacity, gpu: int, used: int) -> None:
        if not node.sharing or used >= SHARE_UNITS:
            return
        room = self._share_room.get(node.gpu_type)
        if room is None:
            room = self._share_room[node.gpu_type] = [{} for _ in range(SHARE_UNITS)]
        room[SHARE_UNITS - used][(node.node_id, gpu)] = None

    def _room_remove(self, node: NodeCapacity, gpu: int, used: int) -> None:
        if node.sharing and used < SHARE_UNITS:
            del self._share_room[node.gpu_type][SHARE_UNITS - used][(node.node_id, gpu)]

    def shares_gpus(self, gpu_type: str) -> bool:
        """Whether any ready node of the type shares its GPUs."""
        return any(self._sharing.get(gpu_type, ()))

    def share_slot(
        self,
        gpu_type: str,
        milli: int,
        cpus: float = 0.0,
        memory_mb: int = 0,
        only: Collection[str] | None = None,
        exclude: Collection[str] = (),
    ) -> tuple[str, int] | None:
        """Where a share of ``milli`` thousandths goes: (node, GPU) of the type, on a node
        with ``cpus`` and ``memory_mb`` free (among ``only`` when given, never ``exclude``).

        In best-fit order: a GPU already shared with the least room that still holds the
        share (the room left over is the smallest, and the roomier GPUs stay for bigger
        shares), else a fresh GPU of the sharing node with the fewest free GPUs; the first
        that strands nothing, else the one that strands least (module docstring)."""
        found = self.share_fit(gpu_type, milli, cpus, memory_mb, only, exclude)
        return None if found is None else (found[0][2], found[1])

    def share_fit(
        self,
        gpu_type: str,
        milli: int,
        cpus: float = 0.0,
        memory_mb: int = 0,
        only: Collection[str] | None = None,
        exclude: Collection[str] = (),
    ) -> tuple[Fit, int] | None:
        """``share_slot``'s choice as (its fit, the GPU)."""

        best: tuple[Fit, int | None] | None = None
        looks = MAX_STRANDING_LOOKS
        for tightness, node, gpu in self._share_candidates(gpu_type, milli, cpus, memory_mb, only, exclude):
            strands = share_strands(self.mix, node, gpu, milli, cpus, memory_mb)
            if best is None or strands < best[0][0]:
                best = (strands, tightness, node.node_id), gpu
            looks -= 1
            if not strands or not looks:
                break
        return None if best is None else self._fresh_gpu(best)

    def _share_candidates(
        self,
        gpu_type: str,
        milli: int,
        cpus: float,
        memory_mb: int,
        only: Collection[str] | None,
        exclude: Collection[str],
    ) -> Iterator[tuple[int, NodeCapacity, int | None]]:
        """Where a share could go, in best-fit order, as (tightness, node, GPU or None for a
        free one)."""
        room = self._share_room.get(gpu_type)
        for free in range(milli, SHARE_UNITS) if room is not None else ():
            for node_id, gpu in room[free]:  # type: ignore[index]
                node = self.nodes[node_id]
                if (
                    (only is None or node_id in only)
                    and node_id not in exclude
                    and has_room(node, cpus, memory_mb)
                ):
                    yield free, node, gpu
        sharing = self._sharing.get(gpu_type, [])
        for count in range(1, len(sharing)):
            for node_id in sharing[count]:
                node = self.nodes[node_id]
                if (
                    (only is None or node_id in only)
                    and node_id not in exclude
                    and has_room(node, cpus, memory_mb)
                ):
                    yield SHARE_UNITS + count, node, None

    def _fresh_gpu(self, found: tuple[Fit, int | None]) -> tuple[Fit, int]:
        """The fit with its GPU: a shared one as found, else the free one to open."""
        fit, gpu = found
        if gpu is None:
            node = self.nodes[fit[2]]
            gpu = nvlink_choice(node.free_gpus, node.domains, 1)[0]
        return fit, gpu

    def take_share(self, node_id: str, gpu: int, milli: int) -> None:
        """A share of ``milli`` thousandths of the node's GPU, now taken (a free GPU is
        opened for it)."""
        node = self.nodes[node_id]
        used = node.shares.get(gpu)
        if used is None:
            if gpu not in node.free_gpus:
                raise ValueError(f"node {node_id}: GPU {gpu} is neither free nor shared")
            self._rebucket(node, [g for g in node.free_gpus if g != gpu])
            used = 0
        else:
            self._room_remove(node, gpu, used)
        if used + milli > SHARE_UNITS:
            raise ValueError(
                f"node {node_id}: GPU {gpu} has {SHARE_UNITS - used} thousandths free, not {milli}"
            )
        node.shares[gpu] = used + milli
        self._room_add(node, gpu, used + milli)

    def give_share(self, node_id: str, gpu: int, milli: int) -> None:
        """A share comes back; the GPU is free again when its last share leaves."""
        node = self.nodes.get(node_id)
        if node is None or node.total_gpus <= 0:
            return  # not a ready node: nothing to offer
        used = node.shares.get(gpu, 0)
        if used < milli:
            raise ValueError(f"node {node_id}: GPU {gpu} holds {used} thousandths in shares, not {milli}")
        self._room_remove(node, gpu, used)
        if used == milli:
            del node.shares[gpu]
            self._rebucket(node, sorted([*node.free_gpus, gpu]))
        else:
            node.shares[gpu] = used - milli
            self._room_add(node, gpu, used - milli)

    def types(self) -> list[str]:
        """GPU types of ready nodes, the most free GPUs (when the index was built) first."""
        return self._types

    def free(self, gpu_type: str | None = None, rack: str | None = None) -> int:
        if gpu_type is None:
            return sum(self._free.values())
        if rack is not None:
            self._index_racks(gpu_type)
            return self._rack_free.get((gpu_type, rack), 0)
        return self._free.get(gpu_type, 0)

    def racks(self, gpu_type: str) -> list[str]:
        """The racks with nodes of the type ("" for nodes without a label)."""
        racks = self._racks.get(gpu_type)
        if racks is None:
            of_type = {n.rack for n in self.nodes.values() if n.gpu_type == gpu_type and n.total_gpus > 0}
            racks = self._racks[gpu_type] = sorted(of_type)
        return racks

    def _index_racks(self, gpu_type: str) -> None:
        """The buckets by (type, rack) of a type, once: each rack's bucket is the type's
        bucket filtered to the rack's nodes, in the same order, so ties resolve as if they
        had been kept from the start (both change with the same moves, ``_rebucket``)."""
        if gpu_type in self._rack_indexed:
            return
        self._rack_indexed.add(gpu_type)
        racks = self.racks(gpu_type)
        for rack in racks:
            self._rack_buckets[(gpu_type, rack)], self._rack_free[(gpu_type, rack)] = [], 0
        for count, bucket in enumerate(self._buckets.get(gpu_type, [])):
            for rack in racks:
                self._rack_buckets[(gpu_type, rack)].append({})
            for node_id in bucket:
                rack = self.nodes[node_id].rack
                self._rack_buckets[(gpu_type, rack)][count][node_id] = None
                self._rack_free[(gpu_type, rack)] += count

    def largest(self, gpu_type: str | None = None) -> int:
        """GPUs of the biggest ready node (of the type), free or not."""
        if gpu_type is None:
            return max(self._largest.values(), default=0)
        return self._largest.get(gpu_type, 0)

    def _buckets_of(self, gpu_type: str, rack: str | None) -> list[dict[str, None]]:
        if rack is None:
            return self._buckets.get(gpu_type, [])
        self._index_racks(gpu_type)
        return self._rack_buckets.get((gpu_type, rack), [])

    def most_free(self, gpu_type: str, rack: str | None = None) -> int:
        """The most free GPUs on any one node of the type (in the rack)."""
        buckets = self._buckets_of(gpu_type, rack)
        for count in range(len(buckets) - 1, 0, -1):
            if buckets[count]:
                return count
        return 0

    def holes(self, gpu_type: str) -> list[tuple[str, int]]:
        """(node, free GPUs) of the type's nodes with some GPUs free, the most free first."""
        buckets = self._buckets_of(gpu_type, None)
        return [(node_id, count) for count in range(len(buckets) - 1, 0, -1) for node_id in buckets[count]]

    def best_fit(
        self,
        gpu_type: str,
        want: int,
        exclude: Iterable[str] = (),
        rack: str | None = None,
        cpus: float = 0.0,
        memory_mb: int = 0,
    ) -> str | None:
        """The node of the type (in the rack) with the fewest free GPUs that still has
        ``want``, and ``cpus`` and ``memory_mb`` free: the first in that order where taking
        them strands nothing, else the one where it strands least (module docstring)."""
        found = self.whole_fit(gpu_type, want, exclude, rack, cpus, memory_mb)
        return None if found is None else found[2]

    def whole_fit(
        self,
        gpu_type: str,
        want: int,
        exclude: Iterable[str] = (),
        rack: str | None = None,
        cpus: float = 0.0,
        memory_mb: int = 0,
    ) -> Fit | None:
        """``best_fit``'s choice, as its fit."""
        best: Fit | None = None
        looks = MAX_STRANDING_LOOKS
        excluded = set(exclude)
        buckets = self._buckets_of(gpu_type, rack)
        for count in range(max(want, 1), len(buckets)):  # best-fit order
            for node_id in buckets[count]:
                node = self.nodes[node_id]
                if node_id in excluded or not has_room(node, cpus, memory_mb):
                    continue
                strands = whole_strands(self.mix, node, want, cpus, memory_mb)
                if not strands:
                    return strands, count, node_id
                if best is None or strands < best[0]:
                    best = strands, count, node_id
                looks -= 1
                if not looks:
                    return best
        return best

    def take(self, node_id: str, count: int) -> tuple[int, ...]:
        """``count`` free GPUs of the node, now taken: NVLink-close ones (``nvlink_choice``)."""
        node = self.nodes[node_id]
        if not node.domains:
            taken = tuple(node.free_gpus[:count])  # one domain: the lowest indices
            self._rebucket(node, node.free_gpus[count:])
            return taken
        chosen = nvlink_choice(node.free_gpus, node.domains, count)
        self._rebucket(node, [g for g in node.free_gpus if g not in chosen])
        return chosen

    def take_exact(self, node_id: str, gpus: Iterable[int]) -> None:
        node = self.nodes[node_id]
        wanted = set(gpus)
        missing = wanted - set(node.free_gpus)
        if missing:
            raise ValueError(f"node {node_id}: GPUs {sorted(missing)} are not free")
        self._rebucket(node, [g for g in node.free_gpus if g not in wanted])

    def give(self, node_id: str, gpus: Iterable[int]) -> None:
        """GPUs come free on the node (a placement undone, a job preempted in a what-if)."""
        node = self.nodes.get(node_id)
        if node is None or node.total_gpus <= 0:
            return  # not a ready node: nothing to offer
        back = set(gpus)
        overlap = back & set(node.free_gpus)
        if overlap:
            raise ValueError(f"node {node_id}: GPUs {sorted(overlap)} given back twice")
        self._rebucket(node, sorted([*node.free_gpus, *back]))

    def _rebucket(self, node: NodeCapacity, free: list[int]) -> None:
        kind, change = node.gpu_type, len(free) - len(node.free_gpus)
        in_rack = (kind, node.rack)
        by_rack = self._rack_buckets.get(in_rack)  # None: not indexed by rack (yet)
        sets = [self._buckets[kind]]
        if by_rack is not None:
            sets.append(by_rack)
        if node.sharing:
            sets.append(self._sharing[kind])
        for buckets in sets:
            del buckets[len(node.free_gpus)][node.node_id]
            while len(buckets) <= len(free):
                buckets.append({})
            buckets[len(free)][node.node_id] = None
        self._free[kind] += change
        if by_rack is not None:
            self._rack_free[in_rack] += change
        node.free_gpus = free

    def gpu_less_node(
        self, prefer: Iterable[str], exclude: Iterable[str] = (), cpus: float = 0.0, memory_mb: int = 0
    ) -> str | None:
        """A node for a GPU-less instance (with ``cpus`` and ``memory_mb`` free): one the job
        already uses, else the node with the least idle GPU capacity (free GPUs and room on
        shared ones, in thousandths), a node without GPUs before one with, then the most
        free CPU (a node that counts none first). Spread over the least loaded nodes
        instead, such instances use up the CPU that the idle GPUs of those nodes need, and
        strand them."""
        for node_id in prefer:
            if has_room(self.nodes[node_id], cpus, memory_mb):
                return node_id
        excluded = set(exclude)
        best: tuple[int, bool, float, str] | None = None
        for node in self.nodes.values():
            if node.node_id in excluded or not has_room(node, cpus, memory_mb):
                continue
            idle = SHARE_UNITS * len(node.free_gpus) + sum(
                SHARE_UNITS - held for held in node.shares.values()
            )
            # A node without GPUs first among those as idle: its CPUs serve no GPU.
            cpus_first = -math.inf if node.free_cpus is None else -node.free_cpus
            key = (idle, node.total_gpus > 0, cpus_first, node.node_id)
            if best is None or key < best:
                best = key
        return None if best is None else best[3]


def has_room(node: NodeCapacity, cpus: float, memory_mb: int) -> bool:
    """Whether the node has ``cpus`` and ``memory_mb`` free (always, where it sets no limit)."""
    return (node.free_cpus is None or node.free_cpus >= cpus - 1e-9) and (
        node.free_memory_mb is None or node.free_memory_mb >= memory_mb
    )


def nvlink_choice(free: list[int], domains: dict[int, int], count: int) -> tuple[int, ...]:
    """``count`` of the ``free`` GPUs, NVLink-close: all from the domain with the fewest
    free GPUs that still has ``count`` (lowest indices), else from the fullest domains first."""
    by_domain: dict[int, list[int]] = {}
    for gpu in free:  # ascending, so each domain's list is too
        by_domain.setdefault(domains.get(gpu, 0), []).append(gpu)
    fitting = [d for d, gpus in by_domain.items() if len(gpus) >= count]
    if fitting:
        best = min(fitting, key=lambda d: (len(by_domain[d]), d))
        return tuple(by_domain[best][:count])
    chosen: list[int] = []
    for domain in sorted(by_domain, key=lambda d: (-len(by_domain[d]), d)):
        chosen.extend(by_domain[domain][: count - len(chosen)])
        if len(chosen) == count:
            break
    return tuple(sorted(chosen))
