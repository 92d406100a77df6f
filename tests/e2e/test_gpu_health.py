"""GPU health through real processes: a simulated GPU is broken by the fault file of the
running exporter, the monitor drains the node, the scheduler moves the job; an admin
undrains it. Also /metrics with the job using each GPU."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import asyncpg
import httpx

from tests.e2e.stack import HOLD, Stack, corral, submit, wait_state

ENDS = {"SUCCEEDED", "FAILED", "CANCELLED"}


async def _node(http: httpx.AsyncClient, until: str, timeout_s: float = 20.0) -> dict[str, Any]:
    """Poll the only node until ``until`` (a Python expression over ``node``) holds."""
    deadline = time.monotonic() + timeout_s
    node: dict[str, Any] = {}
    while time.monotonic() < deadline:
        (node,) = (await http.get("/api/v1/nodes")).json()["items"]
        if eval(until, {}, {"node": node}):  # noqa: S307  # the test's own expression
            return node
        await asyncio.sleep(0.1)
    raise AssertionError(f"node never satisfied {until}: {node}")


async def _alert(stack: Stack, rule: str, timeout_s: float = 10.0) -> dict[str, Any]:
    conn = await asyncpg.connect(stack.env["CORRAL_DATABASE_URL"])
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            row = await conn.fetchrow(
                "SELECT id, severity, summary, state FROM alerter.alerts WHERE rule = $1", rule
            )
            if row is not None:
                return dict(row)
            await asyncio.sleep(0.1)
    finally:
        await conn.close()
    raise AssertionError(f"no {rule} alert within {timeout_s}s")


async def _alert_state(
    http: httpx.AsyncClient, alert_id: str, state: str, timeout_s: float = 10.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    alert: dict[str, Any] = {}
    while time.monotonic() < deadline:
        alert = (await http.get(f"/api/v1/alerts/{alert_id}")).json()
        if alert.get("state") == state:
            return alert
        await asyncio.sleep(0.1)
    raise AssertionError(f"alert {alert_id} never became {state}: {alert}")


async def _health_events(http: httpx.AsyncClient, node_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = (await http.get(f"/api/v1/nodes/{node_id}")).json()["health_events"]
    return events


async def test_a_gpu_falling_off_the_bus_drains_the_node_and_moves_its_job(stack: Stack) -> None:
    async with stack.client() as http:
        job_id = await submit(http, HOLD)
        job = await wait_state(http, job_id, {"RUNNING"})
        gpu = job["attempts"][0]["gpu_indices"][0]
        node_id = job["attempts"][0]["node_id"]

        # /metrics names the job using the GPU (readings are written every second here).
        ports = json.loads((stack.home / "run" / "health-ports.json").read_text())
        wanted = f'gpu="{gpu}"'
        deadline = time.monotonic() + 15
        metrics = ""
        while time.monotonic() < deadline:
            metrics = (await http.get(f"http://127.0.0.1:{ports['monitor']}/metrics")).text
            line = next(
                (x for x in metrics.splitlines() if x.startswith("DCGM_FI_DEV_GPU_TEMP{") and wanted in x), ""
            )
            if f'job="{job_id}"' in line:
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"no GPU metric with the job's label:\n{metrics[:3000]}")
        assert 'simulated="true"' in line
        assert f'corral_node_drained{{node="{node_id}"}} 0.0' in metrics

        (stack.home / "gpu-faults.yaml").write_text(f"gpus:\n  {gpu}: {{xid: 79}}\n")
        try:
            node = await _node(http, "node['drained']")
        except AssertionError:
            print("MONITOR", stack.logs("monitor"), "EXPORTER", stack.logs("exporter"))
            raise
        assert node["drain_evicts"] is True
        assert node["drained_by"] == "monitor"
        assert "Xid 79" in node["drain_reason"]

        # The job cannot finish on a GPU that is gone: preempted, back in the queue, uncounted.
        job = await wait_state(http, job_id, {"PENDING"}, timeout_s=30)
        (ended,) = job["attempts"]
        assert ended["classification"] == "transient"
        assert "drained" in (ended["stop_reason"] or "")
        waiting = await submit(http, "echo fresh")
        await asyncio.sleep(2.0)
        assert (await http.get(f"/api/v1/jobs/{waiting}")).json()["state"] == "PENDING"  # nothing new there

        events = await _health_events(http, node_id)
        assert any(e["condition"] == "xid 79" and e["action"] == "evict" for e in events), events
        alert = await _alert(stack, "GpuUnhealthy")
        assert alert["severity"] == "critical"
        assert "Xid 79" in alert["summary"]
        listed = await asyncio.to_thread(corral, stack, "alerts", "--state", "firing")
        assert alert["id"] in listed.stdout
        assert "CRITICAL" in listed.stdout
        acked = await asyncio.to_thread(corral, stack, "ack", alert["id"], "--note", "on it")
        assert acked.returncode == 0, acked.stderr
        await _alert_state(http, alert["id"], "acknowledged")

        nodes = await asyncio.to_thread(corral, stack, "nodes")
        assert nodes.returncode == 0, nodes.stderr
        assert "DRAINED (evict)" in nodes.stdout
        assert "Xid 79" in nodes.stdout
        gpus = await asyncio.to_thread(corral, stack, "gpus", "--node", node_id)
        assert gpus.returncode == 0, gpus.stderr
        lines = gpus.stdout.splitlines()
        assert len(lines) == 8
        assert "Xid 79" in lines[gpu]
        assert "Simulated" in lines[0]

        # An admin undrains it (the hardware was "repaired"): both jobs run.
        (stack.home / "gpu-faults.yaml").write_text("")
        response = await http.post(f"/api/v1/nodes/{node_id}/undrain", json={"reason": "GPU reseated"})
        assert response.status_code == 202
        await _node(http, "not node['drained']")
        assert (await wait_state(http, waiting, ENDS))["state"] == "SUCCEEDED"
        await wait_state(http, job_id, {"RUNNING"})
        stack.release(job_id)
        done = await wait_state(http, job_id, ENDS)
        assert done["state"] == "SUCCEEDED"
        assert len(done["attempts"]) == 2
        events = await _health_events(http, node_id)
        assert events[0]["kind"] == "undrained"
        assert "GPU reseated" in events[0]["detail"]
        # The undrain ended the alert's cause: it resolved itself, with its whole history.
        resolved = await _alert_state(http, alert["id"], "resolved")
        assert [(h["from_state"], h["to_state"], h["actor"]) for h in resolved["history"]] == [
            (None, "firing", "alerter"),
            ("firing", "acknowledged", "admin"),
            ("acknowledged", "resolved", "alerter"),
        ]
        assert resolved["history"][1]["note"] == "on it"
        again = await asyncio.to_thread(corral, stack, "ack", alert["id"])
        assert again.returncode == 1
        assert "409" in again.stderr


async def test_application_xids_do_not_drain_and_an_admin_drain_lets_work_finish(stack: Stack) -> None:
    async with stack.client() as http:
        running = await submit(http, HOLD)
        job = await wait_state(http, running, {"RUNNING"})
        node_id = job["attempts"][0]["node_id"]

        (stack.home / "gpu-faults.yaml").write_text("gpus:\n  5: {xid: 13}\n")
        deadline = time.monotonic() + 15
        while not any(e["condition"] == "xid 13" for e in await _health_events(http, node_id)):
            assert time.monotonic() < deadline, "the Xid 13 was never recorded"
            await asyncio.sleep(0.2)
        (event,) = [e for e in await _health_events(http, node_id) if e["condition"] == "xid 13"]
        assert event["action"] == "ignore"
        assert "application" in event["detail"]
        await asyncio.sleep(1.0)
        assert not (await http.get("/api/v1/nodes")).json()["items"][0]["drained"]

        drained = await asyncio.to_thread(corral, stack, "drain", node_id, "--reason", "BIOS update")
        assert drained.returncode == 0, drained.stderr
        assert "drain requested" in drained.stdout
        unknown = await asyncio.to_thread(corral, stack, "drain", "no-such-node")
        assert unknown.returncode == 1
        assert "404" in unknown.stderr
        assert "no node 'no-such-node'" in unknown.stderr
        node = await _node(http, "node['drained']")
        assert node["drain_reason"] == "BIOS update"
        assert node["drained_by"] == "admin"
        assert node["drain_evicts"] is False
        conn = await asyncpg.connect(stack.env["CORRAL_DATABASE_URL"])
        try:
            assert await conn.fetchval("SELECT count(*) FROM alerter.alerts WHERE rule = 'GpuUnhealthy'") == 0
        finally:
            await conn.close()
        queued = await submit(http, "echo later")
        await asyncio.sleep(2.0)
        assert (await http.get(f"/api/v1/jobs/{queued}")).json()["state"] == "PENDING"
        stack.release(running)  # a plain drain lets running work finish where it is
        assert (await wait_state(http, running, ENDS))["state"] == "SUCCEEDED"

        assert (await asyncio.to_thread(corral, stack, "undrain", node_id)).returncode == 0
        assert (await wait_state(http, queued, ENDS))["state"] == "SUCCEEDED"
