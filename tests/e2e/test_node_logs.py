"""Task logs with nothing shared, real processes: two nodes, each a machine of its own
(its own home: logs, work and state directories), and a control plane (API, scheduler,
launcher, monitor, alerter) whose home is a third directory. The API serves and follows
each task's log by asking its node over NATS (``corral.logs.<node>``), never opening a
file; a node whose agent is stopped is a 503 saying since when, a log followed from it
ends saying so, and its logs come back when it does."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from tests.e2e.stack import HOLD, Stack, submit, wait_state

NODES = ("node-a", "node-b")
CONTROL_PLANE = "api,scheduler,launcher,monitor,alerter"  # no node of its own
ENDS = {"SUCCEEDED", "FAILED", "CANCELLED"}


@dataclass
class Node:
    id: str
    home: Path
    agent: subprocess.Popen[bytes]
    exporter: subprocess.Popen[bytes]

    def release(self, job_id: str) -> None:
        """Let a HOLD task of ``job_id`` on this node finish (its working directory is here)."""
        work = self.home / "work" / job_id
        work.mkdir(parents=True, exist_ok=True)
        (work / "release").touch()

    def release_everything(self) -> None:
        work = self.home / "work"
        for job in work.iterdir() if work.exists() else ():
            (job / "release").touch()


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture
async def cluster(
    database_url: str, nats_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Stack, dict[str, Node]]]:
    env = {"CORRAL_DATABASE_URL": database_url, "CORRAL_NATS_URL": nats_url, "CORRAL_SERVICES": CONTROL_PLANE}
    stack = Stack(tmp_path / "control-plane", env)
    nodes: dict[str, Node] = {}
    for node_id in NODES:
        agent, exporter = stack.start_node(node_id, home=tmp_path / node_id)
        nodes[node_id] = Node(node_id, tmp_path / node_id, agent, exporter)
    try:
        async with stack.running():
            await stack.wait_nodes_ready(len(NODES))
            yield stack, nodes
    finally:
        for node in nodes.values():
            node.release_everything()  # no task outlives the test, whatever it left running
            stop(node.agent)
            stop(node.exporter)


async def until(condition: Callable[[], object], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout_s} s")


async def test_each_nodes_logs_come_from_the_node_and_a_silent_node_is_said_so(
    cluster: tuple[Stack, dict[str, Node]], database_url: str, tmp_path: Path
) -> None:
    stack, nodes = cluster
    async with stack.client() as http:
        on: dict[str, str] = {}  # node -> its job
        for name in ("a", "b"):
            job_id = await submit(http, f"echo from job {name}; {HOLD}", gpus=8, name=f"job-{name}")
            job = await wait_state(http, job_id, {"RUNNING"})
            on[job["attempts"][0]["node_id"]] = job_id
        assert sorted(on) == list(NODES), "an 8-GPU job each: one per node"
        a, b = on["node-a"], on["node-b"]
        # Each log is on its node's disk only, where the API process never looks: the
        # path it would find recorded is pointed nowhere, and the logs come all the same.
        assert not list((tmp_path / "control-plane").rglob("attempt-*.log"))
        assert (tmp_path / "node-a" / "logs" / a / "main-0" / "attempt-1.log").exists()
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute("UPDATE launcher.attempts SET log_path = '/nowhere/' || id")
        finally:
            await conn.close()

        received = dict.fromkeys(NODES, "")

        async def follow(node_id: str) -> int:
            url = f"/api/v1/jobs/{on[node_id]}/logs"
            async with http.stream("GET", url, params={"follow": "true"}) as response:
                async for chunk in response.aiter_text():
                    received[node_id] += chunk
                return response.status_code

        followers = {node_id: asyncio.create_task(follow(node_id)) for node_id in NODES}
        await until(
            lambda: received == {"node-a": "from job a\n", "node-b": "from job b\n"},
            f"both logs followed while their tasks run: {received}",
        )
        nodes["node-b"].release(b)
        assert await asyncio.wait_for(followers["node-b"], 20) == 200
        assert received["node-b"] == "from job b\nreleased\n"
        assert (await wait_state(http, b, ENDS))["state"] == "SUCCEEDED"
        assert (await http.get(f"/api/v1/jobs/{b}/logs")).text == "from job b\nreleased\n"
        assert (await http.get(f"/api/v1/jobs/{a}/logs")).text == "from job a\n"

        # Node a's agent stops (its task runs on): the log followed from it ends, saying
        # why, rather than waiting for a node that may never come back.
        stop(nodes["node-a"].agent)
        assert await asyncio.wait_for(followers["node-a"], 30) == 200
        first, said = received["node-a"].split("\n", 1)
        assert first == "from job a"
        assert said.startswith(
            "\n[corral] node node-a is not answering: it has been silent since its lease ran out"
        )
        assert said.endswith("comes back when the node does; try again then\n")

        silent = await http.get(f"/api/v1/jobs/{a}/logs", params={"attempt": 1})
        assert silent.status_code == 503
        problem = silent.json()
        assert problem["type"].endswith("/node-not-answering")
        assert problem["detail"].startswith(
            "node node-a is not answering: it has been silent since its lease ran out at 20"
        )
        assert " UTC (" in problem["detail"]
        assert problem["detail"].endswith(
            "This task's log is kept on that node and comes back when the node does; try again then"
        )
        followed = await http.get(f"/api/v1/jobs/{a}/logs", params={"attempt": 1, "follow": "true"})
        assert (followed.status_code, followed.json()["detail"]) == (503, problem["detail"])
        # The other node answers as ever.
        assert (await http.get(f"/api/v1/jobs/{b}/logs")).text == "from job b\nreleased\n"

        # Back: its logs come back with it.
        nodes["node-a"].agent = stack.start_node(
            "node-a", home=tmp_path / "node-a", modules=("services.launcher.agent",)
        )[0]
        deadline = time.monotonic() + 30
        while (back := await http.get(f"/api/v1/jobs/{a}/logs", params={"attempt": 1})).status_code == 503:
            assert time.monotonic() < deadline, back.text
            await asyncio.sleep(0.2)
        assert back.status_code == 200, back.text
        assert back.text.startswith("from job a\n")

        # Its task was given up for lost meanwhile (and retried): end the job.
        assert (await http.post(f"/api/v1/jobs/{a}/cancel")).status_code == 200
        for node in nodes.values():
            node.release_everything()
        await wait_state(http, a, ENDS)
