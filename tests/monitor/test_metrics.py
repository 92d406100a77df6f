"""/metrics is written by hand (for speed): it must be the text prometheus_client writes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from services.monitor.ingest import IngestCounters
from services.monitor.metrics import GAUGES, LABELS, THROTTLE_BITS, exposition


def gpu_row(node: int, index: int) -> dict[str, Any]:
    """A ``monitor.gpu_status`` row, with every kind of value the readings can hold."""
    return {
        "node_id": f"n{node}",
        "index": index,
        "uuid": f"GPU-{node}-{index}",
        "model": 'Sim "H100" \\ 80GB\nrev 2' if node == 1 else "Simulated H100 80GB",
        "memory_total_mb": 81559,
        "utilization_pct": None if index == 3 else 42.5 + index,
        "memory_used_mb": 1234567 * index,  # from 1e6 on, Go's exponent notation
        "temperature_c": 55.0,
        "memory_utilization_pct": 1e-05,
        "power_w": 300.123456789,
        "sm_clock_mhz": 1980,
        "throttle_reasons": None if index == 2 else (["GpuIdle", "HwSlowdown", "Unknown"] if index else []),
        "ecc_corrected_volatile": 2**40 if index == 4 else 0,
        "ecc_uncorrected_volatile": 0,
        "remapped_rows_pending": False,
        "remap_failure": None if index == 5 else index == 6,
        "last_xid": 79 if index == 7 else None,
        "lost": index == 7,
        "unsupported": [],
        "hostname": f"host-{node}",
        "simulated": node % 2 == 0,
        "node_state": "READY" if node % 3 else "UNREACHABLE",
        "drained": node % 2 == 1,
        "job_id": "job-1" if index < 2 else None,
        "task": "main-0" if index < 2 else None,
    }


class Reference(Collector):
    """The same metrics through prometheus_client's families (as /metrics once was)."""

    def __init__(self, rows: list[dict[str, Any]], counters: IngestCounters) -> None:
        self.rows = rows
        self.counters = counters

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        def labels(r: dict[str, Any]) -> list[str]:
            simulated = "true" if r["simulated"] else "false"
            job, task = r["job_id"] or "", r["task"] or ""
            return [str(r["index"]), r["uuid"], r["model"], r["hostname"], r["node_id"], job, task, simulated]

        for name, doc, column, scale in GAUGES:
            family = GaugeMetricFamily(name, doc, labels=LABELS)
            for r in self.rows:
                if r[column] is not None:
                    family.add_metric(labels(r), float(r[column]) * scale)
            yield family
        throttle = GaugeMetricFamily(
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Clock throttle reasons (NVML bitmask).", labels=LABELS
        )
        remap = GaugeMetricFamily(
            "DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether row remapping failed.", labels=LABELS
        )
        lost = GaugeMetricFamily("corral_gpu_lost", "1 when NVML reports the GPU lost.", labels=LABELS)
        for r in self.rows:
            if r["throttle_reasons"] is not None:
                throttle.add_metric(
                    labels(r), float(sum(THROTTLE_BITS.get(x, 0) for x in r["throttle_reasons"]))
                )
            if r["remap_failure"] is not None:
                remap.add_metric(labels(r), float(r["remap_failure"]))
            lost.add_metric(labels(r), float(r["lost"]))
        yield from (throttle, remap, lost)
        drained = GaugeMetricFamily(
            "corral_node_drained", "1 when the node takes no new work.", labels=["node"]
        )
        ready = GaugeMetricFamily(
            "corral_node_ready", "1 when the node's heartbeats arrive.", labels=["node"]
        )
        for node_id, r in {r["node_id"]: r for r in self.rows}.items():
            drained.add_metric([node_id], float(r["drained"]))
            ready.add_metric([node_id], float(r["node_state"] == "READY"))
        yield from (drained, ready)
        c = self.counters
        yield CounterMetricFamily(
            "corral_monitor_heartbeats", "Heartbeats this monitor ingested.", value=c.heartbeats
        )
        yield CounterMetricFamily(
            "corral_monitor_gpu_samples", "GPU samples this monitor ingested.", value=c.samples
        )
        yield CounterMetricFamily(
            "corral_monitor_heartbeats_rejected", "Heartbeats that did not validate.", value=c.rejected
        )


async def test_the_exposition_is_prometheus_clients_byte_for_byte() -> None:
    counters = IngestCounters(heartbeats=1_500_000, samples=12_000_000, rejected=3)
    rows = [gpu_row(node, index) for node in range(4) for index in range(8)]
    rows += [gpu_row(node, 0) for node in range(4, 2004)]  # more than one turn of the event loop
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Reference(rows, counters))
    expected = generate_latest(registry).decode()
    assert await exposition(rows, counters) == expected
    assert 'modelName="Sim \\"H100\\" \\\\ 80GB\\nrev 2"' in expected  # escaping was exercised
    assert "e+06" in expected  # and so were Go's exponents


async def test_name_selects_metrics_as_prometheus_client_does() -> None:
    counters = IngestCounters(heartbeats=7, samples=56, rejected=0)
    rows = [gpu_row(node, index) for node in range(3) for index in range(8)]
    registry = CollectorRegistry(auto_describe=True)  # (to know which metric is whose)
    registry.register(Reference(rows, counters))
    for names in (
        {"corral_monitor_gpu_samples_total"},
        {"corral_gpu_lost", "corral_node_ready", "DCGM_FI_DEV_GPU_TEMP"},
    ):
        expected = generate_latest(registry.restricted_registry(names)).decode()
        assert await exposition(rows, counters, frozenset(names)) == expected
    assert await exposition(rows, counters, frozenset({"corral_monitor_gpu_samples_total"})) == (
        "# HELP corral_monitor_gpu_samples_total GPU samples this monitor ingested.\n"
        "# TYPE corral_monitor_gpu_samples_total counter\n"
        "corral_monitor_gpu_samples_total 56.0\n"
    )
