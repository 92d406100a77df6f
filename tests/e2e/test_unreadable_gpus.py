"""A GPU server whose driver is broken never pretends: real processes, with NVML made to
fail (tests/monitor/nvml_failing.py) on a machine whose kernel shows 8 NVIDIA GPUs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from tests.e2e.stack import Stack, corral, submit
from tests.monitor.nvml_failing import failing_nvml, fake_sysfs


async def test_a_node_whose_nvml_fails_is_drained_with_the_error_and_takes_no_work(
    database_url: str, nats_url: str, tmp_path: Path
) -> None:
    env = {
        "CORRAL_DATABASE_URL": database_url,
        "CORRAL_NATS_URL": nats_url,
        "CORRAL_EXPORTER_DEVICE_ROOT": str(fake_sysfs(tmp_path / "machine")),
        "LD_LIBRARY_PATH": str(failing_nvml(tmp_path / "nvml")),
    }
    async with Stack(tmp_path / "home", env).running() as stack, stack.client() as http:
        deadline = time.monotonic() + 30
        node: dict[str, Any] = {}
        while time.monotonic() < deadline:
            nodes = (await http.get("/api/v1/nodes")).json()["items"]
            if nodes and nodes[0]["drained"]:
                node = nodes[0]
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"the node was not drained: {nodes}\n{stack.logs('exporter')}")
        assert node["simulated"] is False, "never simulated GPUs on a machine with NVIDIA GPUs"
        assert node["gpu_count"] == 0
        assert node["drained_by"] == "monitor"
        assert "NVML fails on a machine with 8 NVIDIA GPU(s): Driver Not Loaded" in node["drain_reason"]
        assert "Driver Not Loaded" in stack.logs("exporter")

        # No work lands on it, not even work that needs no GPU.
        gpu_job = await submit(http, "echo never", gpus=1)
        cpu_job = await submit(http, "echo never", gpus=0)
        await asyncio.sleep(3)
        for job_id in (gpu_job, cpu_job):
            job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
            assert job["state"] == "PENDING", job
            assert job["attempts"] == []

        listed = await asyncio.to_thread(corral, stack, "nodes")
        assert listed.returncode == 0, listed.stderr
        assert "DRAINED" in listed.stdout
        assert "Driver Not Loaded" in listed.stdout
