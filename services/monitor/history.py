"""Downsampling GPU readings in memory before they reach Postgres.

Each heartbeat adds one sample per GPU to the open bucket of ``resolution_s`` seconds;
a bucket is written once it has ended (one multi-row statement for every GPU). A coarser
resolution is rolled up from the fine one in SQL, and old rows are pruned, so the table
holds e.g. 10 s buckets for a day and 5 min buckets for a month.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from services.monitor.repository import HistoryRow
from shared.events.types import NodeTelemetryData


@dataclass
class _Bucket:
    samples: int = 0
    utilization_sum: float = 0.0
    utilization_n: int = 0
    utilization_max: float | None = None
    memory_used_max: int | None = None
    temperature_max: float | None = None
    power_sum: float = 0.0
    power_n: int = 0


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


class HistoryAggregator:
    def __init__(self, resolution_s: int) -> None:
        self.resolution_s = resolution_s
        self._buckets: dict[tuple[int, str, int], _Bucket] = {}

    def add(self, data: NodeTelemetryData, at_s: float) -> None:
        start = int(at_s // self.resolution_s) * self.resolution_s
        for gpu in data.gpus:
            if gpu.lost:
                continue
            bucket = self._buckets.get((start, data.node_id, gpu.index))
            if bucket is None:
                bucket = self._buckets[(start, data.node_id, gpu.index)] = _Bucket()
            bucket.samples += 1
            if gpu.utilization_pct is not None:
                bucket.utilization_sum += gpu.utilization_pct
                bucket.utilization_n += 1
                bucket.utilization_max = _max(bucket.utilization_max, gpu.utilization_pct)
            if gpu.memory_used_mb is not None:
                bucket.memory_used_max = max(bucket.memory_used_max or 0, gpu.memory_used_mb)
            bucket.temperature_max = _max(bucket.temperature_max, gpu.temperature_c)
            if gpu.power_w is not None:
                bucket.power_sum += gpu.power_w
                bucket.power_n += 1

    def take_ended(self, now_s: float, owners: dict[tuple[str, int], tuple[str, str]]) -> list[HistoryRow]:
        """Remove and return the buckets that ended before ``now_s``, with their job."""
        current = int(now_s // self.resolution_s) * self.resolution_s
        ended = [key for key in self._buckets if key[0] < current]
        rows = []
        for key in ended:
            start, node_id, index = key
            b = self._buckets.pop(key)
            owner = owners.get((node_id, index))
            rows.append(
                HistoryRow(
                    bucket=datetime.fromtimestamp(start, UTC),
                    node_id=node_id,
                    gpu_index=index,
                    job_id=owner[0] if owner else None,
                    samples=b.samples,
                    utilization_avg=b.utilization_sum / b.utilization_n if b.utilization_n else None,
                    utilization_max=b.utilization_max,
                    memory_used_mb_max=b.memory_used_max,
                    temperature_max=b.temperature_max,
                    power_avg=b.power_sum / b.power_n if b.power_n else None,
                )
            )
        return rows

    def __len__(self) -> int:
        return len(self._buckets)
