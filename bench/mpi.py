"""MPI jobs through the whole stack (``python -m bench.mpi``).

Starts a private stack as ``make up`` does, with two simulated nodes of four GPUs, and
submits ``examples/mpi``'s allreduce as an 8-rank job: a launcher and two workers of four
GPUs (four slots) each, ``mpirun -np 8`` starting the ranks through the workers' sshd.

- ``submit_to_all_ranks_s``: the median over ``--runs`` jobs of the time from the submit's
  answer (201) to the moment every rank's line is in the launcher's log, as a user
  following ``corral logs`` would see it: scheduling, the three tasks' starts, the workers'
  sshd, the ssh barrier, ``mpirun``'s ssh into each worker, and eight interpreters
  importing mpi4py and joining the allreduce;
- ``allreduce_bus_bandwidth_mb_per_s``: one more job timing an allreduce of
  ``--megabytes`` MB over the 8 ranks (loopback TCP between the "nodes": a check that
  the ranks really talk to each other, not a network figure).

Needs Open MPI and OpenSSH's server on this machine (Debian: openmpi-bin, openssh-server;
the test setup installs them) and mpi4py (the dev extra). Prints one JSON line last.
Target: ``submit_to_all_ranks_s`` ≤ 2 on this machine.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.stack import private_stack

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mpi" / "allreduce.py"
RANK = re.compile(r"^rank=(\d+) size=(\d+) sum=(\d+)", re.MULTILINE)
BANDWIDTH = re.compile(r"bus_bandwidth_MBps=([\d.]+)")
RANKS = 8
GPUS_PER_NODE = 4


def spec(extra_args: str = "") -> dict[str, Any]:
    script = f"{shlex.quote(sys.executable)} {shlex.quote(str(EXAMPLE))}"
    return {
        "name": "bench-mpi",
        "framework": "mpi",
        "tasks": [
            {
                "name": "launcher",
                "command": f"mpirun -np {RANKS} {script} {extra_args}".strip(),
                "resources": {"cpus": 0.25, "memory_mb": 512},
            },
            {
                "name": "worker",
                "instances": RANKS // GPUS_PER_NODE,
                "resources": {"gpus": GPUS_PER_NODE, "cpus": 0.5, "memory_mb": 2048},
            },
        ],
        "max_runtime_s": 300,
    }


@dataclass(frozen=True)
class Run:
    all_ranks_s: float  # the submit's answer → every rank's line in the launcher's log
    launcher_started_s: float  # the job's creation → the launcher's command started (after the barrier)
    log: str  # the launcher's whole log, once the job has ended


def run_once(http: httpx.Client, body: dict[str, Any], timeout_s: float = 120) -> Run:
    job_id = http.post("/api/v1/jobs", json=body).raise_for_status().json()["id"]
    accepted = time.monotonic()
    log = ""
    while time.monotonic() - accepted < timeout_s:
        log = http.get(f"/api/v1/jobs/{job_id}/logs", params={"task": "launcher-0"}).text
        if len({m.group(1) for m in RANK.finditer(log)}) == RANKS:
            seconds = time.monotonic() - accepted
            job = _wait_ended(http, job_id, timeout_s)
            launcher = next(a for a in job["attempts"] if a["task_role"] == "launcher")
            started = datetime.fromisoformat(launcher["started_at"])
            waited = (started - datetime.fromisoformat(job["created_at"])).total_seconds()
            log = http.get(f"/api/v1/jobs/{job_id}/logs", params={"task": "launcher-0"}).text
            return Run(seconds, waited, log)
        job = http.get(f"/api/v1/jobs/{job_id}").json()
        if job["state"] in ("FAILED", "CANCELLED"):
            raise RuntimeError(f"job {job_id} {job['state']}: {job['reason']}\n{log}")
        time.sleep(0.02)
    raise RuntimeError(f"not every rank printed within {timeout_s:.0f} s:\n{log}")


def _wait_ended(http: httpx.Client, job_id: str, timeout_s: float) -> dict[str, Any]:
    """Until the job is over and its workers stopped (the next run finds the GPUs free)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job: dict[str, Any] = http.get(f"/api/v1/jobs/{job_id}").json()
        if job["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            if job["state"] != "SUCCEEDED":
                raise RuntimeError(f"job {job_id} {job['state']}: {job['reason']}")
            return job
        time.sleep(0.05)
    raise RuntimeError(f"job {job_id} did not end within {timeout_s:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--megabytes", type=int, default=64)
    parser.add_argument("--keep", action="store_true", help="keep the stack's home for a post-mortem")
    args = parser.parse_args()
    missing = [tool for tool in ("mpirun", "sshd") if shutil.which(tool, path="/usr/bin:/usr/sbin") is None]
    if missing:
        sys.exit(f"bench.mpi needs {' and '.join(missing)}: apt-get install openmpi-bin openssh-server")
    nodes = {"CORRAL_SIMULATED_NODES": str(RANKS // GPUS_PER_NODE)}
    with private_stack(gpus=GPUS_PER_NODE, extra_env=nodes, keep=args.keep) as stack:
        stack.wait_for_gpus(GPUS_PER_NODE)
        headers = {"Authorization": f"Bearer {stack.token()}"}
        with httpx.Client(base_url=stack.base_url, headers=headers, timeout=10) as http:
            run_once(http, spec())  # warm: the page cache, the sandbox helper, sshd's binary
            runs = []
            for _ in range(args.runs):
                run = run_once(http, spec())
                runs.append(run)
                print(
                    f"launcher started {run.launcher_started_s:.2f} s, all {RANKS} ranks printed "
                    f"{run.all_ranks_s:.2f} s after the submit",
                    file=sys.stderr,
                )
            log = run_once(http, spec(f"--bytes {args.megabytes * 1_000_000}")).log
    times = [run.all_ranks_s for run in runs]
    launcher_started = statistics.median(run.launcher_started_s for run in runs)
    bandwidth = BANDWIDTH.search(log)
    print(
        json.dumps(
            {
                "ranks": RANKS,
                "runs": args.runs,
                "submit_to_all_ranks_s": round(statistics.median(times), 3),
                "submit_to_all_ranks_min_s": round(min(times), 3),
                "submit_to_all_ranks_max_s": round(max(times), 3),
                "submit_to_launcher_started_s": round(launcher_started, 3),
                "allreduce_megabytes": args.megabytes,
                "allreduce_bus_bandwidth_mb_per_s": float(bandwidth.group(1)) if bandwidth else None,
            }
        )
    )


if __name__ == "__main__":
    main()
