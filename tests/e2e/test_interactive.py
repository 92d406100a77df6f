"""Interactive access end to end: the API's WebSocket, NATS, the node agent, the task.

Every session here goes the whole way a user's does: ``POST .../sessions`` on the real
API, its WebSocket (``v4.channel.k8s.io``), the API's stream over the stack's own NATS
(each service and node on its own identity), the agent joining the running task, and
back. The user holds a token with ``submit`` and ``exec``, as a person running
``corral exec`` does.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from shared.interactive.protocol import KUBERNETES_SUBPROTOCOL, exit_code_of
from tests.e2e.stack import HOLD, Stack, submit_spec, wait_state

SUBPROTOCOL = Subprotocol(KUBERNETES_SUBPROTOCOL)
# The task says who it is, then waits to be released (or cancelled).
WHO = "echo uid=$(id -u) rank=$RANK; cat /proc/self/cgroup; " + HOLD


@asynccontextmanager
async def user(stack: Stack, name: str) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A user and a client with their token (submit and exec)."""
    async with stack.client() as admin:
        assert (await admin.post("/api/v1/users", json={"name": name})).status_code == 201
        body = {"name": "shell", "user": name, "scopes": ["submit", "exec"]}
        token = (await admin.post("/api/v1/tokens", json=body)).json()["token"]
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=stack.base_url, headers=headers, timeout=10) as http:
        yield http, token


async def running(http: httpx.AsyncClient, command: str, **task: Any) -> str:
    spec = {
        "name": "shell",
        "tasks": [{"name": "main", "command": command, "resources": {"gpus": 0}, **task}],
    }
    job_id = await submit_spec(http, spec)
    await wait_state(http, job_id, {"RUNNING"})
    for _ in range(100):
        attempts = (await http.get(f"/api/v1/jobs/{job_id}")).json()["attempts"]
        if attempts and attempts[-1]["state"] == "RUNNING":
            return job_id
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id}'s task never ran")


async def open_ws(
    stack: Stack, http: httpx.AsyncClient, token: str, job_id: str, **body: Any
) -> ClientConnection:
    created = await http.post(f"/api/v1/jobs/{job_id}/sessions", json={"kind": "exec", **body})
    assert created.status_code == 201, created.text
    url = stack.base_url.replace("http://", "ws://") + created.json()["stream_url"]
    return await connect(
        url, subprotocols=[SUBPROTOCOL], additional_headers={"Authorization": f"Bearer {token}"}
    )


async def until_status(conn: ClientConnection, timeout_s: float = 20.0) -> tuple[bytes, bytes, int]:
    """Everything on stdout and stderr (a forward's data and errors: channels 0 and 1), the
    Status, and the close code."""
    out, status = b"", b""
    async with asyncio.timeout(timeout_s):
        try:
            while True:
                frame = await conn.recv()
                assert isinstance(frame, bytes)
                if frame[0] in (0, 1, 2):
                    out += frame[1:]
                elif frame[0] == 3:
                    status = frame[1:]
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else 0
    return out, status, code


async def test_exec_runs_inside_the_task_as_the_task(stack: Stack) -> None:
    async with user(stack, "ada") as (http, token):
        job_id = await running(http, WHO)
        await asyncio.sleep(0.3)  # the task's first lines, in its log
        log = (await http.get(f"/api/v1/jobs/{job_id}/logs")).text
        probe = "echo uid=$(id -u) rank=$RANK; cat /proc/self/cgroup; exit 3"
        conn = await open_ws(stack, http, token, job_id, command=["sh", "-c", probe], tty=False, stdin=False)
        out, status, code = await until_status(conn)
        assert exit_code_of(status) == 3
        assert code == 1000
        # The same identity, rank and cgroup as the task itself, not the agent's (root's).
        assert out.decode().splitlines() == log.splitlines()[: len(out.decode().splitlines())]
        assert "uid=0 " not in out.decode()
        assert re.search(r"rank=0\b", out.decode())
        # A terminal: a resize reaches it.
        conn = await open_ws(stack, http, token, job_id, command=["sh", "-c", "read x; stty size"], tty=True)
        await conn.send(b'\x04{"Width": 100, "Height": 40}')
        await asyncio.sleep(0.3)
        await conn.send(b"\x00\n")
        out, status, _ = await until_status(conn)
        assert b"40 100" in out
        assert exit_code_of(status) == 0
        audit = (await http.get("/api/v1/sessions", params={"job_id": job_id})).json()["items"]
        assert [(r["user"], r["exit_code"]) for r in audit] == [("ada", 0), ("ada", 3)]
        stack.release(job_id)


async def test_cancelling_the_job_ends_its_sessions_and_an_ended_task_refuses_them(stack: Stack) -> None:
    async with user(stack, "bea") as (http, token):
        job_id = await running(http, HOLD)
        conn = await open_ws(stack, http, token, job_id, command=["cat"], tty=False)
        await conn.send(b"\x00ping\n")
        assert await conn.recv() == b"\x01ping\n"
        assert (await http.post(f"/api/v1/jobs/{job_id}/cancel")).status_code == 200
        _, status, code = await until_status(conn)
        assert json.loads(status)["status"] == "Failure"
        assert code == 1000
        await wait_state(http, job_id, {"CANCELLED"})
        late = await http.post(f"/api/v1/jobs/{job_id}/sessions", json={"kind": "exec"})
        assert late.status_code == 409
        assert "has ended (cancelled)" in late.json()["detail"]


async def test_a_web_app_in_the_task_is_reached_by_port_forward_and_the_proxy(stack: Stack) -> None:
    serve = (
        "echo '<h1>from the task</h1>' > index.html;"
        " exec python3 -m http.server $CORRAL_PORT_HTTP --bind 127.0.0.1"
    )
    async with user(stack, "cy") as (http, token):
        job_id = await running(http, serve, ports={"http": 1})
        page = b""
        for _ in range(50):  # the server's own start ("nothing accepts connections" until then)
            forward = await open_ws(stack, http, token, job_id, kind="port-forward", port="http")
            await forward.send(b"\x00GET / HTTP/1.0\r\n\r\n")
            page, _, _ = await until_status(forward)
            if b"HTTP/1." in page:
                break
            await asyncio.sleep(0.2)
        assert b"<h1>from the task</h1>" in page
        proxied = await http.get(f"/proxy/{job_id}/main-0/http/")
        assert proxied.status_code == 200
        assert "<h1>from the task</h1>" in proxied.text
        async with user(stack, "dee") as (other, _):
            assert (await other.get(f"/proxy/{job_id}/main-0/http/")).status_code == 404
        assert (await http.post(f"/api/v1/jobs/{job_id}/cancel")).status_code == 200
