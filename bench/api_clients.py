"""The load generators of ``bench.api`` and ``bench.e2e`` (``python -m bench.api_clients``).

Why a separate process: on a machine of few cores a client in the API's own process (or in
the benchmark's, next to the publisher) would share an event loop or a GIL with what it
measures. Here it has its own interpreter, and the benchmark reports its CPU beside the
API's so a reader can see it did not starve the server.

Why not httpx: its client costs about as much CPU per request as the server's side of a
submit (docs/performance.md), so the figures would measure the client. Both generators speak HTTP/1.1 over
asyncio directly: a submit worker writes one pre-encoded request on a keep-alive
connection and reads the answer by its ``Content-Length`` (the API always sends one for
JSON); an SSE subscriber is an ``asyncio.Protocol`` that only looks for the ``id:``
lines in what arrives (the stream's chunked framing puts each on a line of its own).

Two commands, each told everything as one JSON argument:

- ``submit``: ``concurrency`` connections share ``warmup + submits`` POSTs; the last
  ``submits`` are timed. Prints one JSON line: round trips, statuses, wall time, CPU.
- ``sse``: opens ``subscribers`` streams of ``GET /api/v1/events``, prints ``connected``
  once each has had its first bytes, then one line ``<seq> <count> <first> <last>``
  (``time.monotonic()``, system-wide on Linux, so comparable with the publisher's
  stamps) each time an event of ``CORRAL_JOBS`` has reached every subscriber. Reading
  ``stop`` on stdin, it prints a summary JSON line and exits.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any

_ID_LINE = re.compile(rb"(?:^|\n)id: (\d+)\.")


def _cpu_s() -> float:
    times = os.times()
    return times.user + times.system


# --- submits ------------------------------------------------------------------------


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lowered = head.lower()
    at = lowered.find(b"content-length:")
    if at < 0:
        raise RuntimeError(f"a response without Content-Length: {head[:200]!r}")
    length = int(lowered[at + 15 : lowered.find(b"\r\n", at)])
    return status, await reader.readexactly(length)


async def submit_load(spec: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps(spec["body"]).encode()
    request = (
        f"POST /api/v1/jobs HTTP/1.1\r\nHost: {spec['host']}\r\n"
        f"Authorization: Bearer {spec['token']}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    warmup, total = int(spec["warmup"]), int(spec["warmup"]) + int(spec["submits"])
    issued = 0
    round_trips: list[float] = []
    statuses: dict[str, int] = {}
    errors: list[str] = []
    marks: dict[str, float] = {}

    def take() -> int | None:
        nonlocal issued
        if issued >= total:
            return None
        issued += 1
        if issued == warmup + 1:
            marks["start"], marks["cpu"] = time.perf_counter(), _cpu_s()
        return issued

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(spec["host"], spec["port"])
        try:
            while (number := take()) is not None:
                started = time.perf_counter()
                writer.write(request)
                status, answer = await _read_response(reader)
                if number > warmup:
                    round_trips.append((time.perf_counter() - started) * 1000)
                    statuses[str(status)] = statuses.get(str(status), 0) + 1
                    if status != 201 and len(errors) < 3:
                        errors.append(answer[:300].decode(errors="replace"))
        finally:
            writer.close()

    async with asyncio.TaskGroup() as tg:
        for _ in range(int(spec["concurrency"])):
            tg.create_task(worker())
    wall = time.perf_counter() - marks["start"]
    return {
        "round_trips_ms": round_trips,
        "statuses": statuses,
        "errors": errors,
        "wall_s": wall,
        "client_cpu_s": _cpu_s() - marks["cpu"],
    }


# --- SSE subscribers ------------------------------------------------------------------


class _Subscriber(asyncio.Protocol):
    """One SSE connection; reports each ``CORRAL_JOBS`` sequence it sees to ``seen``."""

    def __init__(self, request: bytes, seen: Callable[[int, float], None], connected: asyncio.Event) -> None:
        self.request = request
        self.seen = seen
        self.connected = connected
        self.rest = b""
        self.closed = asyncio.Event()
        self.error: Exception | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        self.connected.set()
        text = self.rest + data
        cut = text.rfind(b"\n") + 1  # a line cut by the chunking is finished next time
        self.rest = text[cut:]
        for match in _ID_LINE.finditer(text, 0, cut):
            self.seen(int(match.group(1)), now)

    def connection_lost(self, exc: Exception | None) -> None:
        self.error = exc
        self.closed.set()


async def sse_subscribers(spec: dict[str, Any]) -> None:
    count = int(spec["subscribers"])
    request = (
        f"GET /api/v1/events HTTP/1.1\r\nHost: {spec['host']}\r\n"
        f"Authorization: Bearer {spec['token']}\r\nAccept: text/event-stream\r\n\r\n"
    ).encode()
    arrivals: dict[int, list[float]] = {}  # seq -> [count, first, last]
    cpu_at_start = _cpu_s()

    def seen(seq: int, at: float) -> None:
        entry = arrivals.get(seq)
        if entry is None:
            entry = arrivals[seq] = [0, at, at]
        entry[0] += 1
        entry[2] = at
        if entry[0] == count:
            print(f"{seq} {count} {entry[1]:.6f} {entry[2]:.6f}", flush=True)

    loop = asyncio.get_running_loop()
    transports: list[asyncio.BaseTransport] = []
    protocols: list[_Subscriber] = []
    for batch in range(0, count, 100):  # a storm of 1,000 connects would overflow the backlog
        events = [asyncio.Event() for _ in range(min(100, count - batch))]
        for connected in events:
            factory = functools.partial(_Subscriber, request, seen, connected)
            transport, protocol = await loop.create_connection(factory, spec["host"], spec["port"])
            transports.append(transport)
            protocols.append(protocol)
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 60)
    print("connected", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)  # "stop"
    lost = sum(p.closed.is_set() for p in protocols)
    for each in transports:
        each.close()
    summary = {"client_cpu_s": _cpu_s() - cpu_at_start, "connections_lost": lost}
    print(json.dumps(summary), flush=True)


async def spawn_client(command: str, spec: dict[str, Any]) -> asyncio.subprocess.Process:
    """Start this module's ``command`` (submit or sse) in a process of its own."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.api_clients",
        command,
        json.dumps(spec),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command, spec = argv[0], json.loads(argv[1])
    if command == "submit":
        print(json.dumps(asyncio.run(submit_load(spec))), flush=True)
    elif command == "sse":
        asyncio.run(sse_subscribers(spec))
    else:
        raise SystemExit(f"unknown command {command!r}: submit or sse")
    return 0


if __name__ == "__main__":
    sys.exit(main())
