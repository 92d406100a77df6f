"""GPU telemetry at cluster scale: what one monitor process ingests, what one exporter costs.

Starts a private Postgres and NATS (as ``make up`` does) with only the monitor and one
exporter running, then:

1. ``exporter_cpu_percent``: the CPU time of the stack's own exporter (8 simulated GPUs
   sampled at 1 Hz, heartbeats published to NATS) over a quiet window, as a percentage
   of one core. (On a real H100, NVML's own cost was measured separately: docs/testing.md.)
2. ``samples_per_s``: a publisher process sends heartbeats of ``--nodes`` synthetic nodes
   with 8 GPUs each at ``--hz`` (default 5,000 nodes at 1 Hz: 40,000 GPU samples/s) for
   ``--seconds``; the monitor's own counter (/metrics) says how many it ingested: read
   every half second over the window, its least-squares slope is the rate (the publisher
   sends a burst each second, and two reads alone would depend on where in a burst each
   fell: up to ±1,400 samples/s over the default window). Offered load is reported beside
   it, with the monitor's CPU, the share of everything sent that was ingested by the end
   (``ingested_fraction``; nothing dropped, nothing left queued), and how far its database
   writes were behind at the end.

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import nats

from bench.stack import BenchStack, private_stack
from services.monitor.exporter.simulated import SimulatedGpus
from shared.events import NodeTelemetry
from shared.events.nodes import NodeTelemetryData

# The heartbeat publisher subprocess reads the stack's NATS URL (with the admin's
# credentials) from here.
PUBLISHER_URL = "BENCH_MONITOR_NATS_URL"

TICKS = os.sysconf("SC_CLK_TCK")
READ_EVERY_S = 0.5  # the monitor's counter, over the measuring window


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def _pid(stack: BenchStack, service: str) -> int:
    return int((stack.home / "run" / f"{service}.pid").read_text())


async def _ingested(http: httpx.AsyncClient, port: int) -> int:
    # The counter alone (``name[]``), not a whole scrape: 5,000 nodes are 72 MB of /metrics,
    # seconds to fetch and read, and the window's end would land that much later than the
    # moment the counter was read — after the publisher has stopped.
    params = {"name[]": "corral_monitor_gpu_samples_total"}
    text = (await http.get(f"http://127.0.0.1:{port}/metrics", params=params, timeout=30)).text
    for line in text.splitlines():
        if line.startswith("corral_monitor_gpu_samples_total "):
            return int(float(line.split()[1]))
    raise RuntimeError("the monitor's /metrics has no corral_monitor_gpu_samples_total")


# --- the publisher (a separate process, so it does not share the monitor's core) ----------


def _heartbeats(nodes: int) -> list[tuple[str, bytes]]:
    gpus = SimulatedGpus(8, "Simulated H100 80GB", "bench").sample()
    out = []
    for n in range(nodes):
        node_id = f"bench-{n:05d}"
        event = NodeTelemetry(
            source="corral/bench",
            subject=node_id,
            data=NodeTelemetryData(
                node_id=node_id, hostname=node_id, simulated=True, interval_s=1.0, boot_id="bench", gpus=gpus
            ),
        )
        out.append((event.nats_subject, event.model_dump_json().encode()))
    return out


async def _publish(url: str, nodes: int, hz: float, seconds: float) -> dict[str, Any]:
    nc = await nats.connect(url, max_reconnect_attempts=0, pending_size=64 * 1024 * 1024)
    beats = _heartbeats(nodes)
    sent = 0
    started = time.monotonic()
    period = 1.0 / hz
    tick = 0
    while time.monotonic() - started < seconds:
        for subject, payload in beats:
            await nc.publish(subject, payload)
            sent += 1
            if sent % 500 == 0:
                await nc.flush()
        tick += 1
        await asyncio.sleep(max(0.0, started + tick * period - time.monotonic()))
    await nc.flush()
    elapsed = time.monotonic() - started
    await nc.close()
    return {"heartbeats": sent, "seconds": elapsed, "bytes_per_heartbeat": len(beats[0][1])}


# --- the measurement --------------------------------------------------------------------


async def measure(stack: BenchStack, nodes: int, hz: float, seconds: float, quiet_s: float) -> dict[str, Any]:
    ports = json.loads((stack.home / "run" / "health-ports.json").read_text())
    exporter, monitor = _pid(stack, "exporter"), _pid(stack, "monitor")

    cpu0, t0 = _cpu_seconds(exporter), time.monotonic()
    await asyncio.sleep(quiet_s)
    exporter_cpu = 100.0 * (_cpu_seconds(exporter) - cpu0) / (time.monotonic() - t0)

    async with httpx.AsyncClient() as http:
        publisher = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.monitor",
            "--publisher",
            str(nodes),
            str(hz),
            str(seconds),
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, PUBLISHER_URL: stack.nats_url()},  # (credentials: not in argv)
        )
        at_start = await _ingested(http, ports["monitor"])
        # Warm-up: the first heartbeat of each node registers it (one-off); measure after.
        await asyncio.sleep(min(10.0, seconds / 3))
        window_s = seconds - min(10.0, seconds / 3) - 2.0
        reads: list[tuple[float, int]] = []
        cpu_before, t_before = _cpu_seconds(monitor), time.monotonic()
        while time.monotonic() - t_before < window_s:
            reads.append((time.monotonic(), await _ingested(http, ports["monitor"])))
            await asyncio.sleep(READ_EVERY_S)
        cpu_after, t_after = _cpu_seconds(monitor), time.monotonic()
        out, _ = await asyncio.wait_for(publisher.communicate(), 60)
        await asyncio.sleep(3.0)  # what is still queued reaches the counter
        at_end = await _ingested(http, ports["monitor"])
    published = json.loads(out.decode().strip().splitlines()[-1])
    rate = statistics.linear_regression([t for t, _ in reads], [float(n) for _, n in reads]).slope

    conn = await asyncpg.connect(stack.database_url())
    try:
        await asyncio.sleep(12.0)  # one readings interval: the last writes land
        nodes_seen = await conn.fetchval("SELECT count(*) FROM monitor.nodes WHERE id LIKE 'bench-%'")
        gpus_written = await conn.fetchval(
            "SELECT count(*) FROM monitor.gpu_readings WHERE node_id LIKE 'bench-%'"
        )
        history_rows = await conn.fetchval(
            "SELECT count(*) FROM monitor.gpu_history WHERE node_id LIKE 'bench-%'"
        )
    finally:
        await conn.close()
    window = t_after - t_before
    return {
        "samples_per_s": round(rate),
        "offered_samples_per_s": round(published["heartbeats"] * 8 / published["seconds"]),
        "monitor_cpu_percent": round(100.0 * (cpu_after - cpu_before) / window, 1),
        # (the stack's own exporter adds its 8 samples/s: 0.02 % of the default load)
        "ingested_fraction": round((at_end - at_start) / (published["heartbeats"] * 8), 4),
        "exporter_cpu_percent": round(exporter_cpu, 3),
        "nodes": nodes,
        "hz": hz,
        "nodes_registered": nodes_seen,
        "gpus_with_readings": gpus_written,
        "history_rows": history_rows,
        "bytes_per_heartbeat": published["bytes_per_heartbeat"],
        "window_s": round(window, 1),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--publisher":
        nodes, hz, seconds = int(argv[1]), float(argv[2]), float(argv[3])
        print(json.dumps(asyncio.run(_publish(os.environ[PUBLISHER_URL], nodes, hz, seconds))), flush=True)
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.monitor", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--hz", type=float, default=1.0, help="heartbeats per node per second")
    parser.add_argument("--seconds", type=float, default=40.0, help="how long the load runs")
    parser.add_argument("--quiet-s", type=float, default=30.0, help="window for the exporter's CPU")
    parser.add_argument("--keep", action="store_true", help="keep the stack's home (logs) for a post-mortem")
    args = parser.parse_args(argv)
    # Only what is measured: the other services would react to 5,000 made-up nodes (alerts,
    # scheduling cycles), and their cost is not the monitor's.
    with private_stack(keep=args.keep, extra_env={"CORRAL_SERVICES": "monitor,exporter"}) as stack:
        result = asyncio.run(measure(stack, args.nodes, args.hz, args.seconds, args.quiet_s))
    print(json.dumps({"bench": "monitor", **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
