"""Exec and port-forward through the whole stack (``python -m bench.interactive``).

Starts a private stack as ``make up`` does (a node agent with simulated GPUs), submits a
job whose one task serves a byte sink and source on its port labelled ``data`` (the
role of a notebook's or TensorBoard's server, without their start-up), and measures
through the real path — the client's WebSocket, the API, NATS, the node agent, the
task's terminal or port — as ``corral exec`` and ``corral port-forward`` use it:

- ``exec_echo_p50_ms`` / ``_p99_ms``: ``--keystrokes`` single bytes typed into ``cat`` on
  a terminal, one at a time, each from its send to its echo coming back (the terminal
  echoes a keystroke as a shell's prompt does), after a few untimed ones;
- ``first_byte_ms``: the median over ``--opens`` sessions of the session's POST to the
  first byte of ``echo ready``'s output: the POST, the WebSocket upgrade, the node
  opening a terminal in the task's sandbox and starting the command;
- ``forward_upload_mb_per_s`` / ``forward_download_mb_per_s``: ``--megabytes`` MB (10^6
  bytes) sent to the task's sink, then read from its source, each through one
  port-forward session, timed from the first byte sent to the sink's acknowledgement or
  the source's last byte; ``forward_mb_per_s`` is the lower of the two; and
  ``forward_cpu_s``, the CPU each process spent on both transfers.

Prints one JSON line last. Targets: echo p50 ≤ 20 ms, forward ≥ 50 MB/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import statistics
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect

from bench.stack import BenchStack, private_stack

SUBPROTOCOL = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, STATUS = 0, 1, 2, 3
DATA = 0
CHUNK = 64 * 1024
TASK = "main-0"
PORT_LABEL = "data"

# The task: a sink and a source on its port. A connection says ``sink N`` and sends N
# bytes (answered ``ok`` once all came), or ``source N`` and reads N bytes.
SERVER = """
import os, socket, threading
listener = socket.create_server(("127.0.0.1", int(os.environ["CORRAL_PORT_DATA"])))
block = bytes(1 << 20)
def serve(connection):
    with connection, connection.makefile("rb") as reader:
        verb, size = reader.readline().split()
        left = int(size)
        if verb == b"sink":
            while left > 0:
                chunk = reader.read1(min(left, 1 << 20))
                if not chunk:
                    return
                left -= len(chunk)
            connection.sendall(b"ok\\n")
        else:
            while left > 0:
                connection.sendall(block[: min(left, len(block))])
                left -= min(left, len(block))
while True:
    connection, _ = listener.accept()
    threading.Thread(target=serve, args=(connection,), daemon=True).start()
"""
JOB = {
    "name": "interactive-bench",
    "tasks": [
        {
            "name": "main",
            "command": f"python3 -c {shlex.quote(SERVER)}",
            "resources": {"gpus": 1},
            "ports": {PORT_LABEL: 1},
        }
    ],
}


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class Client:
    """The API as ``corral exec`` / ``corral port-forward`` use it."""

    def __init__(self, stack: BenchStack, http: httpx.AsyncClient) -> None:
        self._stack = stack
        self._http = http
        self._headers = {"Authorization": f"Bearer {stack.token()}"}

    async def run_job(self) -> str:
        answer = await self._http.post("/api/v1/jobs", json=JOB, headers=self._headers)
        job_id = str(answer.raise_for_status().json()["id"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = (await self._http.get(f"/api/v1/jobs/{job_id}", headers=self._headers)).json()["state"]
            if state == "RUNNING":
                return job_id
            if state in ("SUCCEEDED", "FAILED", "CANCELLED"):
                raise RuntimeError(f"the bench's job ended ({state}) before it was measured")
            await asyncio.sleep(0.05)
        raise RuntimeError("the bench's job did not run within 60 s")

    async def cancel(self, job_id: str) -> None:
        await self._http.post(f"/api/v1/jobs/{job_id}/cancel", headers=self._headers)

    @asynccontextmanager
    async def session(self, job_id: str, **spec: Any) -> AsyncIterator[ClientConnection]:
        """A session asked for and its WebSocket connected."""
        answer = await self._http.post(
            f"/api/v1/jobs/{job_id}/sessions", json={"task": TASK, **spec}, headers=self._headers
        )
        if answer.status_code != 201:
            raise RuntimeError(f"session refused: {answer.status_code} {answer.text[:500]}")
        url = f"ws://127.0.0.1:{self._stack.port}{answer.json()['stream_url']}"
        async with connect(
            url,
            subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
            additional_headers=self._headers,
            compression=None,
            max_size=None,
        ) as ws:
            yield ws


async def _frame(ws: ClientConnection) -> tuple[int, bytes]:
    message = await ws.recv()
    if not isinstance(message, bytes) or not message:
        raise RuntimeError(f"not a channel frame: {message!r}")
    return message[0], message[1:]


async def _until_status(ws: ClientConnection) -> bytes:
    while True:
        channel, data = await _frame(ws)
        if channel == STATUS:
            return data


async def echo_times(client: Client, job_id: str, keystrokes: int) -> list[float]:
    """Milliseconds from each keystroke sent to its echo."""
    took: list[float] = []
    async with client.session(job_id, kind="exec", command=["cat"], tty=True) as ws:
        for index in range(keystrokes + 5):
            key = bytes([ord("a") + index % 26])
            started = time.perf_counter()
            await ws.send(bytes([STDIN]) + key)
            seen = b""
            while key not in seen:
                channel, data = await _frame(ws)
                if channel == STATUS:
                    raise RuntimeError(f"cat ended under the bench: {data!r}")
                seen += data
            if index >= 5:  # the first few warm the path up
                took.append((time.perf_counter() - started) * 1000)
        await ws.send(bytes([STDIN]) + b"\r\x04")  # end the line, then end of input: cat exits
        await _until_status(ws)
    return took


async def first_byte_times(client: Client, job_id: str, opens: int) -> list[float]:
    took: list[float] = []
    for _ in range(opens):
        started = time.perf_counter()
        async with client.session(job_id, kind="exec", command=["echo", "ready"], tty=True) as ws:
            while True:
                channel, data = await _frame(ws)
                if channel == STDOUT and data:
                    took.append((time.perf_counter() - started) * 1000)
                    break
                if channel == STATUS:
                    raise RuntimeError(f"echo ended with no output: {data!r}")
            await _until_status(ws)
    return took


async def upload(client: Client, job_id: str, size: int) -> float:
    """Seconds to send ``size`` bytes to the task's sink, acknowledged."""
    block = bytes([DATA]) + bytes(CHUNK)
    async with client.session(job_id, kind="port-forward", port=PORT_LABEL) as ws:
        started = time.perf_counter()
        await ws.send(bytes([DATA]) + f"sink {size}\n".encode())
        left = size
        while left > 0:
            await ws.send(block if left >= CHUNK else block[: left + 1])
            left -= CHUNK
        channel, data = await _frame(ws)
        if (channel, data) != (DATA, b"ok\n"):
            raise RuntimeError(f"the sink said {data[:200]!r} on channel {channel}")
        return time.perf_counter() - started


async def download(client: Client, job_id: str, size: int) -> float:
    """Seconds to read ``size`` bytes from the task's source."""
    async with client.session(job_id, kind="port-forward", port=PORT_LABEL) as ws:
        started = time.perf_counter()
        await ws.send(bytes([DATA]) + f"source {size}\n".encode())
        got = 0
        while got < size:
            channel, data = await _frame(ws)
            if channel != DATA:
                raise RuntimeError(f"the source said {data[:200]!r} on channel {channel}")
            got += len(data)
        return time.perf_counter() - started


async def until_listening(client: Client, job_id: str, timeout_s: float = 30.0) -> None:
    """The task's server takes connections (a forward before it listens is refused)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await download(client, job_id, 1)
            return
        except (RuntimeError, OSError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def measure(stack: BenchStack, args: argparse.Namespace) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=30) as http:
        client = Client(stack, http)
        job_id = await client.run_job()
        try:
            await until_listening(client, job_id)
            echoes = await echo_times(client, job_id, args.keystrokes)
            opens = await first_byte_times(client, job_id, args.opens)
            size = int(args.megabytes * 1_000_000)
            cpu_before = stack.cpu_by_process()
            up_s = await upload(client, job_id, size)
            down_s = await download(client, job_id, size)
            cpu_after = stack.cpu_by_process()
        finally:
            await client.cancel(job_id)
    up, down = size / up_s / 1e6, size / down_s / 1e6
    return {
        "keystrokes": len(echoes),
        "exec_echo_p50_ms": round(statistics.median(echoes), 2),
        "exec_echo_p99_ms": round(_percentile(echoes, 0.99), 2),
        "exec_echo_max_ms": round(max(echoes), 2),
        "opens": len(opens),
        "first_byte_ms": round(statistics.median(opens), 1),
        "first_byte_max_ms": round(max(opens), 1),
        "megabytes": args.megabytes,
        "forward_upload_mb_per_s": round(up, 1),
        "forward_download_mb_per_s": round(down, 1),
        "forward_mb_per_s": round(min(up, down), 1),
        "forward_cpu_s": {
            name: round(cpu_after[name] - cpu_before.get(name, 0.0), 2)
            for name in sorted(cpu_after)
            if name != "nats" or "nats-server" not in cpu_after  # one process, two names
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.interactive", description=__doc__.split("\n")[0])
    parser.add_argument("--keystrokes", type=int, default=300, help="timed single-byte echoes")
    parser.add_argument("--opens", type=int, default=10, help="sessions timed from POST to first byte")
    parser.add_argument("--megabytes", type=float, default=200.0, help="MB each way through port-forward")
    parser.add_argument("--keep", action="store_true", help="keep the stack's home (logs) for a post-mortem")
    args = parser.parse_args(argv)
    if args.keystrokes < 1 or args.opens < 1 or args.megabytes <= 0:
        parser.error("--keystrokes and --opens must be at least 1, --megabytes above 0")
    with private_stack(keep=args.keep) as stack:
        stack.wait_for_gpus(1)
        result = asyncio.run(measure(stack, args))
    print(json.dumps({"bench": "interactive", **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
