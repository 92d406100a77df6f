"""Downsampling in memory: one row per GPU per ended bucket, with the job using the GPU."""

from __future__ import annotations

from services.monitor.history import HistoryAggregator
from shared.events.nodes import GpuSample, NodeTelemetryData


def beat(node: str, util: list[float | None], lost: int | None = None) -> NodeTelemetryData:
    gpus = [
        GpuSample(
            index=i,
            uuid=f"GPU-{i}",
            model="m",
            memory_total_mb=100,
            utilization_pct=u,
            memory_used_mb=10 * i,
            temperature_c=40.0 + (u or 0) / 10,
            power_w=100.0 if u is not None else None,
            lost=i == lost,
        )
        for i, u in enumerate(util)
    ]
    return NodeTelemetryData(node_id=node, hostname=node, simulated=True, interval_s=1.0, gpus=gpus)


def test_buckets_average_and_keep_maxima_and_close_only_when_ended() -> None:
    history = HistoryAggregator(resolution_s=10)
    history.add(beat("n1", [10.0, None]), at_s=1000.0)
    history.add(beat("n1", [30.0, None]), at_s=1005.0)
    history.add(beat("n1", [90.0, None], lost=1), at_s=1011.0)  # next bucket; GPU 1 lost: no sample
    assert history.take_ended(1009.0, {}) == []  # the first bucket is still open
    (first_gpu0, first_gpu1) = sorted(
        history.take_ended(1012.0, {("n1", 0): ("job-a", "main-0")}), key=lambda r: r.gpu_index
    )
    assert first_gpu0.samples == 2
    assert first_gpu0.utilization_avg == 20.0
    assert first_gpu0.utilization_max == 30.0
    assert first_gpu0.temperature_max == 43.0
    assert first_gpu0.power_avg == 100.0
    assert first_gpu0.job_id == "job-a"
    assert first_gpu0.bucket.timestamp() == 1000.0
    assert first_gpu1.utilization_avg is None  # no reading: no made-up number
    assert first_gpu1.job_id is None
    (second,) = history.take_ended(1030.0, {})
    assert second.utilization_avg == 90.0
    assert len(history) == 0
