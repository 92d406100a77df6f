"""``corral submit --wait`` on a whole stack: it follows the job to its end and exits 0
only if it SUCCEEDED — 1 for a job that FAILED — printing one line per change when its
output is not a terminal; ``corral logs`` then shows what the task wrote."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.stack import Stack, corral


async def test_submit_wait_exits_by_how_the_job_ended(stack: Stack, tmp_path: Path) -> None:
    failing = tmp_path / "failing.yaml"
    failing.write_text(
        "name: doomed\ntasks:\n  - name: main\n    command: echo trying; exit 3\n    resources: {gpus: 1}\n"
    )
    failed = corral(stack, "submit", str(failing), "--wait", "--poll-s", "0.1")
    assert failed.returncode == 1, failed.stderr
    lines = failed.stdout.splitlines()
    job_id = lines[0].split()[2]
    assert lines[0].split()[3] in ("PENDING", "SCHEDULED", "RUNNING")
    assert lines[-1].split(" ", 2)[2].startswith(f"{job_id} FAILED: task main-0 exited with code 3")
    logs = corral(stack, "logs", job_id)
    assert (logs.returncode, logs.stdout) == (0, "trying\n")

    fine = tmp_path / "fine.json"
    fine.write_text(json.dumps({"name": "fine", "tasks": [{"name": "main", "command": "echo ok"}]}))
    done = corral(stack, "submit", str(fine), "--wait", "--json")
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)  # --json: only the finished job, nothing else
    assert (job["state"], job["exit_code"]) == ("SUCCEEDED", 0)
    followed = corral(stack, "logs", "-f", job["id"])
    assert (followed.returncode, followed.stdout) == (0, "ok\n")
