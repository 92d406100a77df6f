"""The README's DDP example through the API, many times in a row: does it always succeed?

    .venv/bin/python -m bench.ddp_example [--runs 30] [--steps 300] [--keep]

A private stack (the same supervisor as ``make up``), then ``examples/ddp`` submitted as a
user submits it, one job after another. A run counts as a success only when the job
ends SUCCEEDED, both ranks print the same parameter checksum, and neither rank's log
holds a line that reads like an error (``terminate called``, ``Aborted``, a warning
from torch such as "Failed to initialize NumPy"). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.stack import private_stack

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ddp"
CHECKSUM = re.compile(r"params_sha256=([0-9a-f]{64})")
ALARMING = ("terminate called", "Aborted", "Traceback", "Warning", "warn(")


def example_spec(steps: int | None = None) -> dict[str, Any]:
    """``examples/ddp/job.json`` as ``submit.sh`` fills it in (quoted paths: a checkout's
    may hold spaces); ``steps`` overrides its TRAIN_STEPS."""
    spec: dict[str, Any] = json.loads((EXAMPLE / "job.json").read_text())
    task = spec["tasks"][0]
    task["command"] = task["command"].format(
        python=shlex.quote(sys.executable), script=shlex.quote(str(EXAMPLE / "train.py"))
    )
    if steps is not None:
        task["env"]["TRAIN_STEPS"] = str(steps)
    return spec


def run_once(http: httpx.Client, spec: dict[str, Any], timeout_s: float = 300) -> dict[str, Any]:
    started = time.monotonic()
    job_id = http.post("/api/v1/jobs", json=spec).raise_for_status().json()["id"]
    job: dict[str, Any] = {}
    while time.monotonic() - started < timeout_s:
        job = http.get(f"/api/v1/jobs/{job_id}").json()
        if job["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        time.sleep(0.2)
    seconds = time.monotonic() - started
    logs = [http.get(f"/api/v1/jobs/{job_id}/logs", params={"task": f"worker-{i}"}).text for i in (0, 1)]
    checksums = {match.group(1) for log in logs if (match := CHECKSUM.search(log))}
    alarms = sorted(
        {line.strip() for log in logs for line in log.splitlines() if any(a in line for a in ALARMING)}
    )
    ok = job.get("state") == "SUCCEEDED" and len(checksums) == 1 and all(CHECKSUM.search(log) for log in logs)
    return {
        "job": job_id,
        "state": job.get("state"),
        "reason": job.get("reason"),
        "seconds": round(seconds, 2),
        "same_parameters": len(checksums) == 1,
        "alarming_lines": alarms,
        "ok": ok and not alarms,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--steps", type=int, default=300, help="TRAIN_STEPS of each run (the example's 300)")
    parser.add_argument("--keep", action="store_true", help="keep the stack's home (logs) afterwards")
    args = parser.parse_args()
    spec = example_spec(args.steps)
    results = []
    with private_stack(gpus=8, keep=args.keep) as stack:
        stack.wait_for_gpus(2)
        headers = {"Authorization": f"Bearer {stack.token()}"}
        with httpx.Client(base_url=stack.base_url, headers=headers, timeout=10) as http:
            for n in range(1, args.runs + 1):
                result = run_once(http, spec)
                results.append(result)
                verdict = "ok" if result["ok"] else f"NOT OK: {result['state']} {result['alarming_lines']}"
                print(
                    f"run {n}/{args.runs}: {result['seconds']:.1f} s, {verdict}", file=sys.stderr, flush=True
                )
    failed = [r for r in results if not r["ok"]]
    print(
        json.dumps(
            {
                "bench": "ddp_example",
                "runs": len(results),
                "succeeded": len(results) - len(failed),
                "failed": failed,
                "median_s": statistics.median(r["seconds"] for r in results),
                "max_s": max(r["seconds"] for r in results),
            }
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
