"""Prometheus exposition: every GPU's latest readings, named as NVIDIA's DCGM exporter
names them, labelled with the job and task using the GPU — plus the monitor's own counters and the
process metrics every service has (``shared/metrics.py``).

Read from Postgres at scrape time, so every monitor instance shows the whole cluster
(heartbeats are split between instances; the database has them all).

Written straight in the text format (version 0.0.4), not through prometheus_client's
metric families: a 5,000-node cluster is 40,000 GPUs and some 400,000 samples, and the
client library makes a validated sample object of each, seconds of CPU while the
heartbeats, on the same event loop, wait (docs/performance.md). Here each GPU's label set
is formatted once, and the event loop gets a turn every ``ROWS_PER_TURN`` rows.
tests/monitor/test_metrics.py holds the text to the client library's, byte for byte.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

from prometheus_client.utils import floatToGoString
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from services.monitor import repository
from services.monitor.exporter.nvml import THROTTLE_REASONS
from services.monitor.ingest import HeartbeatIngest, IngestCounters
from shared.db.pool import Database
from shared.metrics import exposition as process_metrics

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


ROWS_PER_TURN = 2000  # GPUs formatted between two turns of the event loop


def _labels(row: Any) -> list[str]:
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


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


# Label pairs are written sorted by name, as prometheus_client writes them.
_LABEL_ORDER = sorted(range(len(LABELS)), key=lambda i: LABELS[i])


def _label_set(row: Any) -> str:
    values = _labels(row)
    return "{" + ",".join(f'{LABELS[i]}="{_escape(values[i])}"' for i in _LABEL_ORDER) + "}"


def _header(name: str, doc: str, kind: str) -> str:
    doc = doc.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


_go_float: Callable[[float], str] = floatToGoString  # (prometheus_client's; untyped there)


def _number(value: float) -> str:
    # What floatToGoString writes: repr() for a finite number below 1e6 (nearly every
    # reading), which needs no call of it (400,000 samples a scrape).
    return repr(value) if -1e6 < value < 1e6 else _go_float(value)


async def _paced(count: int) -> AsyncIterator[range]:
    """``range(count)`` in slices, with a turn of the event loop after each."""
    for start in range(0, count, ROWS_PER_TURN):
        yield range(start, min(start + ROWS_PER_TURN, count))
        await asyncio.sleep(0)


COUNTERS = (  # (metric, help, IngestCounters field)
    ("corral_monitor_heartbeats_total", "Heartbeats this monitor ingested.", "heartbeats"),
    ("corral_monitor_gpu_samples_total", "GPU samples this monitor ingested.", "samples"),
    ("corral_monitor_heartbeats_rejected_total", "Heartbeats that did not validate.", "rejected"),
)


async def exposition(
    rows: Sequence[Any], counters: IngestCounters, names: frozenset[str] | None = None
) -> str:
    """The text format for these ``monitor.gpu_status`` rows and the ingest counters;
    ``names``: only the metrics named (all when None)."""
    out: list[str] = []
    labels: list[str] = []
    async for chunk in _paced(len(rows)):
        labels += [_label_set(rows[i]) for i in chunk]

    async def family(name: str, doc: str, values: Sequence[float | None]) -> None:
        """One gauge over every GPU: ``values[i]`` for ``rows[i]``, None for no sample."""
        if names is not None and name not in names:
            return
        out.append(_header(name, doc, "gauge"))
        async for chunk in _paced(len(values)):
            out.extend(f"{name}{labels[i]} {_number(v)}\n" for i in chunk if (v := values[i]) is not None)

    def node_family(name: str, doc: str, value: Callable[[Any], float]) -> None:
        if names is not None and name not in names:
            return
        out.append(_header(name, doc, "gauge"))
        out.extend(f'{name}{{node="{_escape(n)}"}} {value(r)}\n' for n, r in nodes.items())

    for name, doc, column, scale in GAUGES:
        await family(name, doc, [None if r[column] is None else float(r[column]) * scale for r in rows])
    await family(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "Clock throttle reasons (NVML bitmask).",
        [
            None
            if r["throttle_reasons"] is None
            else float(sum(THROTTLE_BITS.get(x, 0) for x in r["throttle_reasons"]))
            for r in rows
        ],
    )
    await family(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "Whether row remapping failed.",
        [None if r["remap_failure"] is None else float(r["remap_failure"]) for r in rows],
    )
    await family("corral_gpu_lost", "1 when NVML reports the GPU lost.", [float(r["lost"]) for r in rows])
    nodes: dict[str, Any] = {row["node_id"]: row for row in rows}
    node_family("corral_node_drained", "1 when the node takes no new work.", lambda r: float(r["drained"]))
    node_family(
        "corral_node_ready",
        "1 when the node's heartbeats arrive.",
        lambda r: float(r["node_state"] == "READY"),
    )
    for name, doc, field in COUNTERS:
        if names is None or name in names:
            out.append(_header(name, doc, "counter"))
            out.append(f"{name} {_number(float(getattr(counters, field)))}\n")
    return "".join(out)


async def render(db: Database, ingest: HeartbeatIngest, names: frozenset[str] | None = None) -> bytes:
    rows: Sequence[Any] = []
    if names is None or not names <= {name for name, _, _ in COUNTERS}:
        async with db.connection() as conn:
            rows = await repository.latest_gpus(conn)
    body = (await exposition(rows, ingest.counters, names)).encode()
    # The whole scrape also carries this process's own metrics (bus, outbox: shared.metrics).
    return body if names is not None else body + process_metrics()


def metrics_routes(db: Database, ingest: HeartbeatIngest) -> Iterable[Route]:
    async def metrics(request: Request) -> Response:
        # ``?name[]=...`` selects metrics, as prometheus_client's own handlers allow: a
        # counter read (the benchmark's) then costs no scrape of the whole cluster.
        names = frozenset(request.query_params.getlist("name[]")) or None
        return Response(await render(db, ingest, names), media_type=CONTENT_TYPE)

    return [Route("/metrics", metrics)]
