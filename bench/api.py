"""The public API under load (``python -m bench.api``): submits per second and the SSE fan-out.

Starts a private Postgres and NATS as ``make up`` does, with **one API process**
(``--api-processes N``: N sharing the port, their CPU summed) and no other service
(``CORRAL_SERVICES=api``): a scheduler would place the submitted jobs and compete for the
same two cores, and its cost is not the API's. The API's own outbox relay runs, as it
always does, so every submit's ``job.submitted`` event is published to
JetStream during the measurement. One node with 8 H100s is registered straight in
Postgres (as the monitor would), so a submit's "could this ever run?" check works from
its cached cluster shape as in a real cluster (an empty cluster is read on every
submit). The per-token rate limits are turned off: one token makes all the load here.
The load comes from a separate client process (``bench.api_clients``: plain HTTP/1.1 on
asyncio, far cheaper per request than httpx), whose CPU is reported beside the API's
and Postgres'.

1. **Submits**: ``--concurrency`` keep-alive connections share ``--warmup`` then
   ``--submits`` ``POST /api/v1/jobs`` of a one-GPU job with the bootstrap admin token
   (the VC check, the job row, its outbox event and the audit row are all written, as
   for any caller). ``submits_per_s`` is the timed submits over their wall time;
   ``submit_p50_ms`` / ``submit_p99_ms`` the client's round trips; ``api_cpu_ms_per_submit``
   and ``postgres_cpu_ms_per_submit`` the CPU each spent per submit over the window (less
   sensitive to a noisy machine than the rate).
2. **SSE fan-out**: ``--subscribers`` streams of ``GET /api/v1/events`` (admin token, no
   filter: every subscriber gets every event). The benchmark publishes events straight to
   JetStream (``CORRAL_JOBS``, as a scheduler or launcher would) and stamps each just
   before its publish; a subscriber's arrival is when its ``id:`` line reaches the client.
   - paced: ``--sse-rate`` events/s for ``--sse-seconds``; ``sse_latency_p50_ms`` /
     ``_p99_ms`` is publish → the *last* subscriber receiving it (the 1,000th of 1,000),
     ``sse_first_latency_p50_ms`` publish → the first;
   - burst: ``--sse-burst`` events at once; ``sse_events_per_s`` is how many events per
     second reached every subscriber (first publish to the last arrival of the last
     event), ``sse_deliveries_per_s`` that times the subscribers.

Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

import asyncpg
import nats
from nats.js import JetStreamContext

from bench.api_clients import spawn_client
from bench.stack import BenchStack, cpu_s, private_stack, tree_cpu_s
from shared.events import JobSubmitted
from shared.events.jobs import JobSubmittedData

# What a submit would be refused by: one token sends everything (0 turns a limit off).
UNLIMITED = {
    "CORRAL_SERVICES": "api",
    "CORRAL_API_RATE_LIMIT_PER_S": "0",
    "CORRAL_API_SUBMIT_RATE_LIMIT_PER_S": "0",
}
JOB = {"name": "bench", "tasks": [{"name": "main", "command": "true", "resources": {"gpus": 1}}]}
# The same job as an OpenPAI user writes it (protocol v2, sent as JSON as the client sends
# every body): mapped to the native spec on every submit.
OPENPAI_JOB = {
    "protocolVersion": 2,
    "name": "bench",
    "type": "job",
    "prerequisites": [{"name": "image", "type": "dockerimage", "uri": "python:3.12-slim"}],
    "parameters": {"steps": 10},
    "taskRoles": {
        "main": {
            "instances": 1,
            "dockerImage": "image",
            "resourcePerInstance": {"cpu": 1, "memoryMB": 1024, "gpu": 1},
            "commands": ["echo <% $parameters.steps %>", "true"],
        }
    },
    "extras": {
        "hivedScheduler": {"jobPriorityClass": "test", "taskRoles": {"main": {"skuNum": 1}}},
        "corral": {"allowHostExecution": True},
    },
}
BODIES: dict[str, dict[str, Any]] = {"native": JOB, "openpai": OPENPAI_JOB}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class Cpu:
    """CPU seconds of the API processes (all of them) and of Postgres, between two reads."""

    def __init__(self, stack: BenchStack) -> None:
        run = stack.home / "run"
        self.api = [int(p.read_text()) for p in sorted(run.glob("api*.pid"))]
        self.postgres = stack.postmaster_pid()

    def read(self) -> tuple[float, float]:
        return sum(cpu_s(pid) for pid in self.api), tree_cpu_s(self.postgres)


async def measure_submits(
    stack: BenchStack, cpu: Cpu, submits: int, warmup: int, concurrency: int, body: dict[str, Any] = JOB
) -> dict[str, Any]:
    spec = {
        "host": "127.0.0.1",
        "port": stack.port,
        "token": stack.token(),
        "body": body,
        "submits": submits,
        "warmup": warmup,
        "concurrency": concurrency,
    }
    client = await spawn_client("submit", spec)
    assert client.stdout is not None
    # The window is the client's timed part; read CPU around the whole run and take out
    # the warm-up share (the warm-up is a few percent of it, and costs the same per submit).
    api0, pg0 = cpu.read()
    out, _ = await client.communicate()
    api1, pg1 = cpu.read()
    result = json.loads(out.decode().strip().splitlines()[-1])
    round_trips: list[float] = result["round_trips_ms"]
    ok = result["statuses"].get("201", 0)
    if ok != submits:
        raise RuntimeError(f"only {ok} of {submits} submits were accepted: {result['errors']}")
    per = 1000.0 / (submits + warmup)
    return {
        "submits_per_s": round(submits / result["wall_s"], 1),
        "submit_p50_ms": round(statistics.median(round_trips), 2),
        "submit_p99_ms": round(percentile(round_trips, 0.99), 2),
        "submit_max_ms": round(max(round_trips), 2),
        "api_cpu_ms_per_submit": round((api1 - api0) * per, 3),
        "postgres_cpu_ms_per_submit": round((pg1 - pg0) * per, 3),
        "client_cpu_ms_per_submit": round(result["client_cpu_s"] * 1000 / submits, 3),
        "submit_wall_s": round(result["wall_s"], 2),
    }


async def _wait_outbox_drained(stack: BenchStack, timeout_s: float = 120.0) -> None:
    """The submits' events are all on JetStream (they would otherwise reach the SSE
    subscribers in the middle of the fan-out measurement)."""
    conn = await asyncpg.connect(stack.database_url())
    try:
        deadline = time.monotonic() + timeout_s
        while await conn.fetchval("SELECT count(*) FROM corral.outbox WHERE sent_at IS NULL"):
            if time.monotonic() > deadline:
                raise TimeoutError("the API's outbox did not drain")
            await asyncio.sleep(0.2)
    finally:
        await conn.close()


class Publisher:
    """Publishes ``job.submitted`` events to JetStream, stamping each by its stream seq."""

    def __init__(self, js: JetStreamContext) -> None:
        self.js = js
        self.stamps: dict[int, float] = {}
        self.count = 0

    async def publish(self) -> int:
        self.count += 1
        job_id = f"job-bench{self.count:08d}"
        event = JobSubmitted(
            source="corral/bench",
            subject=job_id,
            data=JobSubmittedData(
                job_id=job_id, name="bench", user="admin", virtual_cluster="default", total_gpus=1
            ),
        )
        payload = event.model_dump_json().encode()
        at = time.monotonic()
        ack = await self.js.publish(event.nats_subject, payload)
        self.stamps[ack.seq] = at
        return int(ack.seq)


async def _arrivals(
    stdout: asyncio.StreamReader, wanted: set[int], timeout_s: float
) -> dict[int, tuple[float, float]]:
    """(first, last) arrival of each wanted seq, as the subscribers' process reports them."""
    found: dict[int, tuple[float, float]] = {}
    deadline = time.monotonic() + timeout_s
    while not wanted <= found.keys():
        line = await asyncio.wait_for(stdout.readline(), max(0.1, deadline - time.monotonic()))
        if not line:
            raise RuntimeError("the SSE subscribers' process ended early")
        seq, _, first, last = line.split()
        found[int(seq)] = (float(first), float(last))
    return found


async def measure_sse(
    stack: BenchStack, cpu: Cpu, subscribers: int, rate: float, seconds: float, burst: int
) -> dict[str, Any]:
    spec = {"host": "127.0.0.1", "port": stack.port, "token": stack.token(), "subscribers": subscribers}
    client = await spawn_client("sse", spec)
    assert client.stdout is not None
    assert client.stdin is not None
    stdout = client.stdout
    nc = await nats.connect(stack.nats_url())
    try:
        line = await asyncio.wait_for(stdout.readline(), 120)
        if line.strip() != b"connected":
            raise RuntimeError(f"the SSE subscribers did not connect: {line!r}")
        publisher = Publisher(nc.jetstream())
        # A connected stream registers with the hub a moment after its first bytes: send
        # markers until one reaches every subscriber, then each is registered.
        for _ in range(60):
            try:
                await _arrivals(stdout, {await publisher.publish()}, 1.0)
                break
            except TimeoutError:
                continue
        else:
            raise RuntimeError("the subscribers never all received an event")
        # Paced: latency from publish to the first and the last subscriber.
        api0, _ = cpu.read()
        started, paced = time.monotonic(), []
        for number in range(int(rate * seconds)):
            await asyncio.sleep(max(0.0, started + number / rate - time.monotonic()))
            paced.append(await publisher.publish())
        got = await _arrivals(stdout, set(paced), 60.0)
        api1, _ = cpu.read()
        paced_s = time.monotonic() - started
        last = [(got[s][1] - publisher.stamps[s]) * 1000 for s in paced]
        first = [(got[s][0] - publisher.stamps[s]) * 1000 for s in paced]
        # Burst: how fast the hub and the API's streams push events to everyone.
        burst_started = time.monotonic()
        # All at once: one publish awaiting its ack before the next would measure how
        # fast JetStream acks on a busy machine, not the fan-out.
        sent = list(await asyncio.gather(*(publisher.publish() for _ in range(burst))))
        got = await _arrivals(stdout, set(sent), 120.0)
        span = max(last_at for _, last_at in got.values()) - burst_started
    finally:
        await nc.close()
        client.stdin.write(b"stop\n")
        await client.stdin.drain()
        out, _ = await asyncio.wait_for(client.communicate(), 60)
    summary = json.loads(out.decode().strip().splitlines()[-1])
    return {
        "sse_subscribers": subscribers,
        "sse_rate": rate,
        "sse_latency_p50_ms": round(statistics.median(last), 1),
        "sse_latency_p99_ms": round(percentile(last, 0.99), 1),
        "sse_first_latency_p50_ms": round(statistics.median(first), 1),
        "sse_api_cpu_percent_paced": round(100 * (api1 - api0) / paced_s, 1),
        "sse_events_per_s": round(burst / span, 1),
        "sse_deliveries_per_s": round(burst * subscribers / span),
        "sse_connections_lost": summary["connections_lost"],
    }


async def register_node(stack: BenchStack) -> None:
    """One ready node with 8 H100s, as the monitor would register it."""
    conn = await asyncpg.connect(stack.database_url())
    try:
        async with conn.transaction():
            await conn.execute(
                """INSERT INTO monitor.nodes (id, hostname, simulated, state, gpu_count, last_heartbeat)
                   VALUES ('bench-node', 'bench-node', true, 'READY', 8, now())"""
            )
            await conn.execute(
                """INSERT INTO monitor.gpus (node_id, index, uuid, model, memory_total_mb)
                   SELECT 'bench-node', i, 'GPU-bench-' || i, 'NVIDIA H100 80GB HBM3', 81559
                   FROM generate_series(0, 7) i"""
            )
    finally:
        await conn.close()


async def compare_bodies(stack: BenchStack, cpu: Cpu, args: argparse.Namespace) -> dict[str, Any]:
    """Native and OpenPAI submits in turn, ``--rounds`` times each on the same stack (the
    machine's noise then falls on both alike); each figure is the median of its rounds,
    and ``openpai_ratio`` is the OpenPAI rate over the native one."""
    rounds: dict[str, list[dict[str, Any]]] = {"native": [], "openpai": []}
    for _ in range(args.rounds):
        for name, body in BODIES.items():
            rounds[name].append(
                await measure_submits(stack, cpu, args.submits, args.warmup, args.concurrency, body)
            )
    result: dict[str, Any] = {}
    for name, measured in rounds.items():
        prefix = "" if name == "native" else "openpai_"
        for key in measured[0]:
            result[prefix + key] = statistics.median(m[key] for m in measured)
    result["openpai_ratio"] = round(result["openpai_submits_per_s"] / result["submits_per_s"], 3)
    result["rounds"] = args.rounds
    return result


async def measure(stack: BenchStack, args: argparse.Namespace) -> dict[str, Any]:
    cpu = Cpu(stack)
    await register_node(stack)
    result: dict[str, Any] = {}
    if args.submits and args.openpai:
        result |= await compare_bodies(stack, cpu, args)
    elif args.submits:
        result |= await measure_submits(stack, cpu, args.submits, args.warmup, args.concurrency)
    if args.subscribers:
        await _wait_outbox_drained(stack)
        result |= await measure_sse(
            stack, cpu, args.subscribers, args.sse_rate, args.sse_seconds, args.sse_burst
        )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.api", description=__doc__.split("\n")[0])
    parser.add_argument("--submits", type=int, default=5000, help="timed submits (0: skip)")
    parser.add_argument("--warmup", type=int, default=500, help="untimed submits first")
    parser.add_argument("--concurrency", type=int, default=16, help="client connections submitting")
    parser.add_argument("--subscribers", type=int, default=1000, help="SSE streams (0: skip)")
    # Well below what 1,000 streams take (``sse_events_per_s``), so the latency is one
    # event's fan-out, not a queue.
    parser.add_argument("--sse-rate", type=float, default=2.0, help="events/s in the paced phase")
    parser.add_argument("--sse-seconds", type=float, default=15.0, help="length of the paced phase")
    parser.add_argument("--sse-burst", type=int, default=200, help="events sent at once")
    parser.add_argument(
        "--openpai",
        action="store_true",
        help="submit the same job as an OpenPAI document too, in turn with the native one (openpai_*)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="with --openpai: rounds of each body")
    parser.add_argument("--keep", action="store_true", help="keep the stack's home (logs) for a post-mortem")
    parser.add_argument(
        "--api-processes", type=int, default=1, help="API processes sharing the port (CORRAL_API_PROCESSES)"
    )
    args = parser.parse_args(argv)
    env = {**UNLIMITED, "CORRAL_API_PROCESSES": str(args.api_processes)}
    with private_stack(keep=args.keep, extra_env=env) as stack:
        result = asyncio.run(measure(stack, args))
    line = {"bench": "api", "concurrency": args.concurrency, "api_processes": args.api_processes, **result}
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
