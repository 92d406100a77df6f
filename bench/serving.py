"""The gateway to services, through the whole stack (``python -m bench.serving``).

Starts a private stack as ``make up`` does, creates a service whose one replica is a
tiny HTTP server (``POST /api/v1/services``; the node agent runs it and probes it), waits
until ``/serve/<name>/`` answers, and measures with a raw keep-alive HTTP/1.1 client, so
the client's own cost stays out of the figures:

- ``gateway_overhead_p50_ms`` / ``_p99_ms``: ``--requests`` sequential GETs straight to
  the replica's port, then as many through the API's gateway (``/serve/<name>/``, with a
  token), after a few untimed ones; the overhead is the difference of the percentiles;
- ``requests_per_s``: ``--concurrency`` keep-alive connections each sending requests
  through the gateway one after another for ``--seconds``; with ``api_cpu_s``, the CPU the
  API process spent meanwhile;
- ``register_to_first_request_s``: the closed loop, timed from a succeeded job's output to
  a first 200: register the output as a model version, create a service with that version
  as its input, wait for its first answer through the gateway (``--no-closed-loop`` skips
  it; if it fails, the figure is null and ``closed_loop_error`` says why).

Prints one JSON line last. Targets: overhead p50 ≤ 2 ms, ≥ 2,000 requests/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import statistics
import sys
import time
from typing import Any

import asyncpg
import httpx

from bench.stack import BenchStack, private_stack

SERVICE = "bench-echo"
MODEL = "bench-model"
# The replica: a minimal keep-alive HTTP/1.1 server that answers every request "ok" (or,
# given a model directory, the model file's content), so the replica's own time is small.
SERVER = """
import asyncio, os, sys
model = os.environ.get("CORRAL_MODEL_DIR_BENCH_MODEL")
body = open(os.path.join(model, "weights.txt"), "rb").read() if model else b"ok"
head = b"HTTP/1.1 200 OK\\r\\ncontent-type: text/plain\\r\\ncontent-length: %d\\r\\n\\r\\n"
answer = head % len(body) + body
async def serve(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\\r\\n\\r\\n")
            for line in head.split(b"\\r\\n"):
                if line.lower().startswith(b"content-length:") and int(line[15:]):
                    await reader.readexactly(int(line[15:]))
            writer.write(answer)
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()
async def main():
    server = await asyncio.start_server(serve, "0.0.0.0", int(os.environ["CORRAL_PORT_HTTP"]))
    await server.serve_forever()
asyncio.run(main())
"""


def service_spec(name: str, inputs: list[dict[str, str]] | None = None) -> dict[str, Any]:
    task = {
        "name": "main",
        "command": f"python3 -c {shlex.quote(SERVER)}",
        # No GPU: a replica runs within its virtual cluster's guaranteed GPUs, and a fresh
        # stack's default cluster guarantees none.
        "resources": {"gpus": 0, "cpus": 1},
        "ports": {"http": 1},
    }
    return {
        "name": name,
        "kind": "service",
        "tasks": [task],
        "inputs": inputs or [],
        "service": {"replicas": 1, "port": "http", "readiness": {"path": "/", "period_s": 0.2}},
    }


TRAINING = {
    "name": "bench-train",
    "tasks": [
        {
            "name": "main",
            "command": 'mkdir -p "$CORRAL_OUTPUT_DIR/model"'
            ' && echo weights > "$CORRAL_OUTPUT_DIR/model/weights.txt"',
            "resources": {"gpus": 1},
        }
    ],
    "outputs": [{"name": "model", "path": "model"}],
}


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class RawClient:
    """One kept-alive HTTP/1.1 connection sending the same GET again and again."""

    def __init__(self, port: int, path: str, token: str | None) -> None:
        self._port = port
        auth = f"authorization: Bearer {token}\r\n" if token else ""
        self._request = f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{auth}\r\n".encode()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def get(self) -> int:
        if self._reader is None or self._writer is None:
            self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self._port)
        self._writer.write(self._request)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length, chunked = 0, False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"transfer-encoding":
                chunked = True
        if chunked:
            while size := int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16):
                await self._reader.readexactly(size + 2)
            await self._reader.readuntil(b"\r\n")
        elif length:
            await self._reader.readexactly(length)
        return status

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


async def latencies(client: RawClient, count: int) -> list[float]:
    """Milliseconds of each of ``count`` sequential requests (after 20 untimed ones)."""
    took: list[float] = []
    for index in range(count + 20):
        started = time.perf_counter()
        status = await client.get()
        if status != 200:
            raise RuntimeError(f"a request answered {status}")
        if index >= 20:
            took.append((time.perf_counter() - started) * 1000)
    return took


async def throughput(stack: BenchStack, connections: int, seconds: float) -> tuple[float, int]:
    """Requests per second through the gateway, and how many failed."""
    deadline = time.monotonic() + seconds
    counts = [0] * connections
    failed = [0] * connections

    async def one(index: int) -> None:
        client = RawClient(stack.port, f"/serve/{SERVICE}/", stack.token())
        try:
            while time.monotonic() < deadline:
                if await client.get() == 200:
                    counts[index] += 1
                else:
                    failed[index] += 1
        finally:
            client.close()

    started = time.monotonic()
    async with asyncio.TaskGroup() as tg:
        for index in range(connections):
            tg.create_task(one(index))
    return sum(counts) / (time.monotonic() - started), sum(failed)


async def create_service(http: httpx.AsyncClient, spec: dict[str, Any]) -> None:
    answer = await http.post("/api/v1/services", json=spec)
    if answer.status_code != 201:
        raise RuntimeError(f"service {spec['name']} refused: {answer.status_code} {answer.text[:500]}")


async def first_answer(http: httpx.AsyncClient, name: str, timeout_s: float = 120.0) -> str:
    """The body of the service's first 200 through the gateway."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        answer = await http.get(f"/serve/{name}/")
        if answer.status_code == 200:
            return answer.text
        last = f"{answer.status_code} {answer.text[:300]}"
        await asyncio.sleep(0.05)
    raise RuntimeError(f"service {name} did not answer within {timeout_s:.0f} s; last: {last}")


async def replica_port(stack: BenchStack, name: str) -> int:
    """The port the service's ready replica listens on (for the direct requests)."""
    conn = await asyncpg.connect(stack.database_url())
    try:
        ports = await conn.fetchval(
            "SELECT a.ports -> 'http' ->> 0 FROM launcher.attempts a"
            " JOIN api.service_replicas r ON r.job_id = a.job_id"
            " WHERE r.service = $1 AND a.state = 'RUNNING' AND a.ready LIMIT 1",
            name,
        )
    finally:
        await conn.close()
    if ports is None:
        raise RuntimeError(f"service {name} has no ready replica in Postgres")
    return int(ports)


async def closed_loop(http: httpx.AsyncClient) -> float:
    """Seconds from a succeeded job's output to the first 200 of a service serving it."""
    job_id = (await http.post("/api/v1/jobs", json=TRAINING)).raise_for_status().json()["id"]
    deadline = time.monotonic() + 120
    while (state := (await http.get(f"/api/v1/jobs/{job_id}")).json()["state"]) != "SUCCEEDED":
        if state in ("FAILED", "CANCELLED") or time.monotonic() > deadline:
            raise RuntimeError(f"the training job ended {state}")
        await asyncio.sleep(0.1)
    started = time.perf_counter()
    registered = await http.post(f"/api/v1/models/{MODEL}/versions", json={"from": f"{job_id}:model"})
    if registered.status_code != 201:
        raise RuntimeError(f"registering the model: {registered.status_code} {registered.text[:300]}")
    version = registered.json()["version"]
    await create_service(http, service_spec(f"{MODEL}-svc", [{"model": f"{MODEL}@{version}"}]))
    body = await first_answer(http, f"{MODEL}-svc")
    took = time.perf_counter() - started
    if body.strip() != "weights":
        raise RuntimeError(f"the service answered {body[:100]!r}, not the model's content")
    return took


async def measure(stack: BenchStack, args: argparse.Namespace) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {stack.token()}"}
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=30, headers=headers) as http:
        await create_service(http, service_spec(SERVICE))
        await first_answer(http, SERVICE)
        direct_client = RawClient(await replica_port(stack, SERVICE), "/", None)
        gateway_client = RawClient(stack.port, f"/serve/{SERVICE}/", stack.token())
        try:
            direct = await latencies(direct_client, args.requests)
            through = await latencies(gateway_client, args.requests)
        finally:
            direct_client.close()
            gateway_client.close()
        cpu_before = stack.cpu_by_process()
        rate, failed = await throughput(stack, args.concurrency, args.seconds)
        cpu_after = stack.cpu_by_process()
        result: dict[str, Any] = {
            "requests": args.requests,
            "direct_p50_ms": round(statistics.median(direct), 3),
            "gateway_p50_ms": round(statistics.median(through), 3),
            "gateway_overhead_p50_ms": round(statistics.median(through) - statistics.median(direct), 3),
            "gateway_overhead_p99_ms": round(_percentile(through, 0.99) - _percentile(direct, 0.99), 3),
            "concurrency": args.concurrency,
            "requests_per_s": round(rate, 1),
            "failed_requests": failed,
            "api_cpu_s": round(cpu_after.get("api", 0.0) - cpu_before.get("api", 0.0), 2),
            "register_to_first_request_s": None,
        }
        if not args.no_closed_loop:
            try:
                result["register_to_first_request_s"] = round(await closed_loop(http), 2)
            except (RuntimeError, httpx.HTTPError, KeyError) as exc:
                result["closed_loop_error"] = str(exc)[:500]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serving", description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="sequential requests timed each way")
    parser.add_argument("--concurrency", type=int, default=32, help="keep-alive connections for requests/s")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long requests/s is measured")
    parser.add_argument("--no-closed-loop", action="store_true", help="skip register_to_first_request_s")
    parser.add_argument("--keep", action="store_true", help="keep the stack's home (logs) for a post-mortem")
    args = parser.parse_args(argv)
    if args.requests < 1 or args.concurrency < 1 or args.seconds <= 0:
        parser.error("--requests and --concurrency must be at least 1, --seconds above 0")
    with private_stack(keep=args.keep) as stack:
        stack.wait_for_gpus(1)
        result = asyncio.run(measure(stack, args))
    print(json.dumps({"bench": "serving", **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
