"""Downsampling GPU readings in memory before they reach Postgres.

Each heartbeat adds one sample per GPU to the open bucket of ``resolution_s`` seconds;
a bucket is written once it has ended (one multi-row statement for every GPU). A coarser
resolution is rolled up from the fine one in SQL, and old rows are pruned, so the table
holds e.g. 10 s buckets for a day and 5 min buckets for a month.
"""

from __future__ import annotations

from datetime import UTC, datetime

from services.monitor.repository import HistoryRow
from shared.events.nodes import NodeTelemetryData


class _Bucket:
    """Running sums of one GPU's bucket (a plain class with slots: this is the hot path)."""

    __slots__ = ("mem_max", "power_n", "power_sum", "samples", "temp_max", "util_max", "util_n", "util_sum")

    def __init__(self) -> None:
        self.samples = 0
        self.util_sum = 0.0
        self.util_n = 0
        self.util_max: float | None = None
        self.mem_max: int | None = None
        self.temp_max: float | None = None
        self.power_sum = 0.0
        self.power_n = 0


class HistoryAggregator:
    """The open buckets, keyed by (bucket start, node), each holding its GPUs' buckets.

    Keyed by node rather than by GPU because ``add`` runs for every heartbeat: one key
    built and looked up per heartbeat instead of one per GPU (about a third of its cost).
    """

    def __init__(self, resolution_s: int) -> None:
        self.resolution_s = resolution_s
        self._buckets: dict[tuple[int, str], dict[int, _Bucket]] = {}

    def add(self, data: NodeTelemetryData, at_s: float) -> None:
        start = int(at_s // self.resolution_s) * self.resolution_s
        key = (start, data.node_id)
        gpu_buckets = self._buckets.get(key)
        if gpu_buckets is None:
            gpu_buckets = self._buckets[key] = {}
        for gpu in data.gpus:
            if gpu.lost:
                continue
            b = gpu_buckets.get(gpu.index)
            if b is None:
                b = gpu_buckets[gpu.index] = _Bucket()
            b.samples += 1
            util = gpu.utilization_pct
            if util is not None:
                b.util_sum += util
                b.util_n += 1
                if b.util_max is None or util > b.util_max:
                    b.util_max = util
            mem = gpu.memory_used_mb
            if mem is not None and (b.mem_max is None or mem > b.mem_max):
                b.mem_max = mem
            temp = gpu.temperature_c
            if temp is not None and (b.temp_max is None or temp > b.temp_max):
                b.temp_max = temp
            power = gpu.power_w
            if power is not None:
                b.power_sum += power
                b.power_n += 1

    def take_ended(self, now_s: float, owners: dict[tuple[str, int], tuple[str, str]]) -> list[HistoryRow]:
        """Remove and return the buckets that ended before ``now_s``, with their job."""
        current = int(now_s // self.resolution_s) * self.resolution_s
        ended = [key for key in self._buckets if key[0] < current]
        rows = []
        for key in ended:
            start, node_id = key
            bucket = datetime.fromtimestamp(start, UTC)
            for index, b in self._buckets.pop(key).items():
                owner = owners.get((node_id, index))
                rows.append(
                    HistoryRow(
                        bucket=bucket,
                        node_id=node_id,
                        gpu_index=index,
                        job_id=owner[0] if owner else None,
                        samples=b.samples,
                        utilization_avg=b.util_sum / b.util_n if b.util_n else None,
                        utilization_max=b.util_max,
                        memory_used_mb_max=b.mem_max,
                        temperature_max=b.temp_max,
                        power_avg=b.power_sum / b.power_n if b.power_n else None,
                    )
                )
        return rows

    def __len__(self) -> int:
        """The open GPU buckets."""
        return sum(len(gpu_buckets) for gpu_buckets in self._buckets.values())
