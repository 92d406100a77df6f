"""A real workload: the PyTorch DDP example trains as a 2-task gang, and both ranks end
with identical parameters (examples/ddp)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tests.e2e.stack import Stack, submit_spec, wait_state

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp"
FINAL = re.compile(r"rank=(\d) first_loss=([\d.]+) final_loss=([\d.]+) params_sha256=([0-9a-f]{64})")


async def test_ddp_example_trains_as_a_gang_with_identical_final_parameters(stack: Stack) -> None:
    spec = json.loads((EXAMPLE / "job.json").read_text())
    task = spec["tasks"][0]
    task["command"] = task["command"].format(python=sys.executable, script=EXAMPLE / "train.py")
    async with stack.client() as http:
        job_id = await submit_spec(http, spec)
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"}, timeout_s=180)
        logs = [
            (await http.get(f"/api/v1/jobs/{job_id}/logs", params={"task": f"worker-{i}"})).text
            for i in (0, 1)
        ]
    assert job["state"] == "SUCCEEDED", f"{job['reason']}\n{logs[0]}\n{logs[1]}"
    finals = [FINAL.search(log) for log in logs]
    assert all(finals), logs
    ranks = {m.group(1) for m in finals if m}
    assert ranks == {"0", "1"}
    checksums = {m.group(4) for m in finals if m}
    assert len(checksums) == 1, f"ranks ended with different parameters: {logs}"
    for match in finals:
        assert match is not None
        assert float(match.group(3)) < float(match.group(2)) / 10, "the loss fell: it really trained"
    assert "world=2" in logs[0]
