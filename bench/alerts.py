"""How fast alerts reach the on-call engineer, through a private stack as ``make up`` runs it.

- ``job_failure_to_webhook_p50_ms`` / ``_p99_ms``: ``--jobs`` jobs that exit 3; from the
  moment the node agent recorded the exit (the attempt's ``finished_at``) to the moment a
  real HTTP receiver got the Alertmanager-format webhook. Target p99 <= 1 s.
- ``node_down_to_page_s``: an extra node (its own exporter process) is killed; from the
  kill (its last heartbeat was at most one interval before) to the PagerDuty-format page
  at the receiver, with default liveness settings. Target <= 30 s.

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import asyncpg
import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bench.e2e import _percentile
from bench.stack import BenchStack, private_stack
from corral.local.ports import free_port


class Receiver:
    """A webhook/PagerDuty receiver that notes when each notification arrived."""

    def __init__(self) -> None:
        self.port = free_port()
        self.arrivals: list[tuple[str, float, dict[str, Any]]] = []

    async def handle(self, request: Request) -> JSONResponse:
        self.arrivals.append((request.path_params["path"], time.time(), await request.json()))
        return JSONResponse({"status": "success"}, status_code=202)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"


async def _wait(condition: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        await asyncio.sleep(0.02)


async def _job_failures(stack: BenchStack, receiver: Receiver, jobs: int) -> list[float]:
    headers = {"Authorization": f"Bearer {stack.token()}"}
    spec = {"name": "fails", "tasks": [{"name": "main", "command": "exit 3", "resources": {"gpus": 1}}]}
    async with httpx.AsyncClient(base_url=stack.base_url, headers=headers, timeout=10) as http:
        job_ids = [(await http.post("/api/v1/jobs", json=spec)).json()["id"] for _ in range(jobs)]

    def hooked() -> dict[str, float]:
        return {
            body["alerts"][0]["labels"]["job"]: at for path, at, body in receiver.arrivals if path == "hook"
        }

    await _wait(lambda: len(hooked()) >= jobs, 120)
    conn = await asyncpg.connect(stack.database_url())
    try:
        rows = await conn.fetch(
            "SELECT job_id, extract(epoch FROM max(finished_at))::float8 AS ended"
            " FROM launcher.attempts WHERE job_id = ANY($1) GROUP BY job_id",
            job_ids,
        )
    finally:
        await conn.close()
    arrived = hooked()
    return [(arrived[r["job_id"]] - r["ended"]) * 1000 for r in rows]


async def _node_down(stack: BenchStack, receiver: Receiver) -> float:
    env = {
        **os.environ,
        **stack.nats_env(),
        "CORRAL_EXPORTER_NODE_ID": "bench-doomed",
        "CORRAL_HEALTH_PORT": str(free_port()),
        "CORRAL_TELEMETRY_LOG_LEVEL": "WARNING",
    }
    node = subprocess.Popen([sys.executable, "-m", "services.monitor.exporter"], env=env)  # noqa: ASYNC220
    conn = await asyncpg.connect(stack.database_url())
    try:
        for _ in range(600):
            if await conn.fetchval("SELECT count(*) FROM monitor.nodes WHERE id = 'bench-doomed'"):
                break
            await asyncio.sleep(0.05)
    finally:
        await conn.close()
    await asyncio.sleep(2.0)
    node.send_signal(signal.SIGKILL)
    killed = time.time()
    node.wait()

    def paged() -> list[float]:
        return [
            at
            for path, at, body in receiver.arrivals
            if path == "pd" and body.get("dedup_key") == "NodeUnreachable/bench-doomed"
        ]

    await _wait(lambda: bool(paged()), 120)
    return paged()[0] - killed


async def measure(stack: BenchStack, receiver: Receiver, jobs: int) -> dict[str, Any]:
    (stack.home / "routing.yaml").write_text(
        "receivers:\n"
        f"  - {{name: tools, webhook: {{url: '{receiver.url('hook')}'}}}}\n"
        f"  - {{name: oncall, pagerduty: {{routing_key: BENCH, url: '{receiver.url('pd')}'}}}}\n"
        "route:\n  receiver: tools\n  routes:\n    - {match: {severity: critical}, receiver: oncall}\n"
    )
    await asyncio.sleep(3.0)  # the alerter re-reads the file every 2 s
    latencies = await _job_failures(stack, receiver, jobs)
    page_s = await _node_down(stack, receiver)
    return {
        "job_failure_to_webhook_p50_ms": round(_percentile(latencies, 0.50), 1),
        "job_failure_to_webhook_p99_ms": round(_percentile(latencies, 0.99), 1),
        "job_failure_to_webhook_max_ms": round(max(latencies), 1),
        "node_down_to_page_s": round(page_s, 1),
        "jobs": jobs,
    }


async def run(jobs: int, keep: bool) -> dict[str, Any]:
    receiver = Receiver()
    app = Starlette(routes=[Route("/{path}", receiver.handle, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=receiver.port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        with private_stack(keep=keep) as stack:
            return await measure(stack, receiver, jobs)
    finally:
        server.should_exit = True
        await serving


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.alerts", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100, help="failing jobs for the webhook latency")
    parser.add_argument("--keep", action="store_true", help="keep the stack's home (logs) for a post-mortem")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.jobs, args.keep))
    print(json.dumps({"bench": "alerts", **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
