"""A real workload: the PyTorch DDP example trains as a 2-task gang, and both ranks end
with identical parameters (examples/ddp); and it ends cleanly, with nothing of gloo still
running when its interpreter exits."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from bench.ddp_example import EXAMPLE, example_spec
from corral.local.ports import free_port
from tests.e2e.stack import Stack, submit_spec, wait_state

FINAL = re.compile(r"rank=(\d) first_loss=([\d.]+) final_loss=([\d.]+) params_sha256=([0-9a-f]{64})")


async def test_ddp_example_trains_as_a_gang_with_identical_final_parameters(stack: Stack) -> None:
    async with stack.client() as http:
        job_id = await submit_spec(http, example_spec())
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
    for log in logs:  # nothing that reads like an error (torch warned without NumPy)
        assert "Warning" not in log, log
        assert "terminate called" not in log, log


# Runs the example, then lists the process's threads from an exit handler registered
# before it, which therefore runs after the example's own: what is still alive when the
# interpreter starts tearing itself down.
_THREADS_AT_EXIT = """
import atexit, os, runpy, sys
def threads():
    names = sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))
    print("threads at exit:", ",".join(names), flush=True)
atexit.register(threads)
runpy.run_path(sys.argv[1], run_name="__main__")
"""


def test_ddp_example_leaves_no_gloo_thread_running_into_interpreter_exit() -> None:
    """Gloo's worker threads, its TCP loop and rank 0's store server, still running while
    the interpreter exits, race its teardown: a rank sometimes aborted after printing its
    result (exit 134). The example frees them all first, deterministically."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    env["TRAIN_STEPS"] = "5"
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", _THREADS_AT_EXIT, str(EXAMPLE / "train.py")],
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [rank.communicate(timeout=120)[0] for rank in ranks]
    for rank, output in zip(ranks, outputs, strict=True):
        assert rank.returncode == 0, output
        (line,) = [x for x in output.splitlines() if x.startswith("threads at exit:")]
        alive = line.split(":", 1)[1].strip().split(",")
        assert not [name for name in alive if "gloo" in name or "tcpstore" in name], output
