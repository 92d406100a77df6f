"""Prometheus exposition: every GPU's latest readings, named as NVIDIA's DCGM exporter
names them, labelled with the job and task using the GPU — plus the monitor's own counters.

Read from Postgres at scrape time, so every monitor instance shows the whole cluster
(heartbeats are split between instances; the database has them all).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from services.monitor.exporter.nvml import THROTTLE_REASONS
from services.monitor.ingest import HeartbeatIngest
from services.monitor.repository import SQL
from shared.db.pool import Database

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LABELS = ("gpu", "UUID", "modelName", "Hostname", "node", "job", "task", "simulated")

# (metric, help, column, scale)
GAUGES: tuple[tuple[str, str, str, float], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "utilization_pct", 1.0),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "memory_utilization_pct", 1.0),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "memory_used_mb", 1.0),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temperature_c", 1.0),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_w", 1.0),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "sm_clock_mhz", 1.0),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "Volatile single-bit (corrected) ECC errors.",
        "ecc_corrected_volatile",
        1.0,
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Volatile double-bit (uncorrected) ECC errors.",
        "ecc_uncorrected_volatile",
        1.0,
    ),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last Xid error encountered.", "last_xid", 1.0),
)
# NVML's own name -> bit table, read the other way (the readings store reason names).
THROTTLE_BITS = {name: bit for bit, name in THROTTLE_REASONS.items()}


def _labels(row: dict[str, Any]) -> list[str]:
    return [
        str(row["index"]),
        row["uuid"],
        row["model"],
        row["hostname"],
        row["node_id"],
        row["job_id"] or "",
        row["task"] or "",
        "true" if row["simulated"] else "false",
    ]


class _Snapshot(Collector):
    def __init__(self, rows: list[dict[str, Any]], ingest: HeartbeatIngest) -> None:
        self._rows = rows
        self._ingest = ingest

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        for name, doc, column, scale in GAUGES:
            family = GaugeMetricFamily(name, doc, labels=LABELS)
            for row in self._rows:
                if row[column] is not None:
                    family.add_metric(_labels(row), float(row[column]) * scale)
            yield family
        throttle = GaugeMetricFamily(
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Clock throttle reasons (NVML bitmask).", labels=LABELS
        )
        remap = GaugeMetricFamily(
            "DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether row remapping failed.", labels=LABELS
        )
        lost = GaugeMetricFamily("corral_gpu_lost", "1 when NVML reports the GPU lost.", labels=LABELS)
        for row in self._rows:
            if row["throttle_reasons"] is not None:
                mask = sum(THROTTLE_BITS.get(r, 0) for r in row["throttle_reasons"])
                throttle.add_metric(_labels(row), float(mask))
            if row["remap_failure"] is not None:
                remap.add_metric(_labels(row), float(row["remap_failure"]))
            lost.add_metric(_labels(row), float(row["lost"]))
        yield throttle
        yield remap
        yield lost
        nodes: dict[str, dict[str, Any]] = {row["node_id"]: row for row in self._rows}
        drained = GaugeMetricFamily(
            "corral_node_drained", "1 when the node takes no new work.", labels=["node"]
        )
        ready = GaugeMetricFamily(
            "corral_node_ready", "1 when the node's heartbeats arrive.", labels=["node"]
        )
        for node_id, row in nodes.items():
            drained.add_metric([node_id], float(row["drained"]))
            ready.add_metric([node_id], float(row["node_state"] == "READY"))
        yield drained
        yield ready
        counters = self._ingest.counters
        for name, doc, value in (
            ("corral_monitor_heartbeats", "Heartbeats this monitor ingested.", counters.heartbeats),
            ("corral_monitor_gpu_samples", "GPU samples this monitor ingested.", counters.samples),
            ("corral_monitor_heartbeats_rejected", "Heartbeats that did not validate.", counters.rejected),
        ):
            yield CounterMetricFamily(name, doc, value=value)


async def render(db: Database, ingest: HeartbeatIngest) -> bytes:
    async with db.connection() as conn:
        rows = [dict(r) for r in await conn.fetch(SQL.latest_gpus)]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(rows, ingest))
    return generate_latest(registry)


def metrics_routes(db: Database, ingest: HeartbeatIngest) -> Iterable[Route]:
    async def metrics(_: Request) -> Response:
        return Response(await render(db, ingest), media_type=CONTENT_TYPE)

    return [Route("/metrics", metrics)]
