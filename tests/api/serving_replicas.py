"""Replicas for the gateway's tests: real processes serving HTTP/1.1 with keep-alive on
127.0.0.1, each answering what it received (its name, the method, the target, the
headers and the body) as JSON; ``/status/<code>`` answers that code, ``/chunked`` a
chunked body (with a chunk extension and a trailer). They are rows in
Postgres as the service controller and the launcher leave them (``add_replica``)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from dataclasses import dataclass
from typing import Any

from corral.local.ports import free_port
from shared.db.pool import Database
from shared.ids import new_job_id

SERVER = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NAME = sys.argv[2]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size).decode()
                self.rfile.readline()
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n")
            return
        status = int(self.path.split("/")[2]) if self.path.startswith("/status/") else 200
        out = json.dumps({"replica": NAME, "method": self.command, "target": self.path,
                          "headers": list(self.headers.items()), "body": body}).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.send_header("keep-alive", "timeout=5")
        self.send_header("set-cookie", "corral_session=stolen; Path=/")
        self.send_header("set-cookie", "app=1; Path=/")
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = answer

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


@dataclass
class Replica:
    name: str
    port: int
    process: asyncio.subprocess.Process

    @classmethod
    async def start(cls, name: str) -> Replica:
        port = free_port()
        process = await asyncio.create_subprocess_exec(sys.executable, "-c", SERVER, str(port), name)
        for _ in range(200):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return cls(name, port, process)
            await asyncio.sleep(0.02)
        process.kill()
        raise RuntimeError(f"replica {name} did not listen on {port}")

    async def kill(self) -> None:
        if self.process.returncode is None:
            os.kill(self.process.pid, signal.SIGKILL)
            await self.process.wait()


async def add_service(
    db: Database, name: str, owner: str = "alice", *, public: bool = False, replicas: int = 2
) -> None:
    await db.execute(
        "INSERT INTO api.services (name, owner, virtual_cluster, spec, replicas, public)"
        " VALUES ($1, $2, 'default', $3, $4, $5)",
        name,
        owner,
        _spec(name),
        replicas,
        public,
    )


async def add_replica(
    db: Database, service: str, port: int, *, ready: bool = True, detail: str = "", owner: str = "alice"
) -> str:
    """A replica job of ``service`` whose RUNNING attempt listens on ``port``."""
    job_id = new_job_id()
    await db.execute(
        "INSERT INTO api.jobs (id, name, username, virtual_cluster, spec, total_gpus, state)"
        " VALUES ($1, $2, $3, 'default', $4, 0, 'RUNNING')",
        job_id,
        service,
        owner,
        _spec(service),
    )
    await db.execute(
        "INSERT INTO api.service_replicas (job_id, service, revision) VALUES ($1, $2, 1)", job_id, service
    )
    await db.execute(
        "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no, node_id,"
        " gpu_indices, state, ports, host, ready, ready_detail)"
        " VALUES ($1, $2, 0, 'main', 0, 1, 'node-t', '{}', 'RUNNING', $3, '127.0.0.1', $4, $5)",
        f"att-{job_id}",
        job_id,
        {"http": [port]},
        ready,
        detail,
    )
    return job_id


def _spec(name: str) -> dict[str, Any]:
    task = {"name": "main", "instances": 1, "command": "serve", "ports": {"http": 1}}
    return {"name": name, "kind": "service", "service": {"port": "http"}, "tasks": [task]}
