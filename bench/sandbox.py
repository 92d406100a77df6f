"""What the task sandbox costs per task (``python -m bench.sandbox``, as root).

Runs ``--tasks`` trivial tasks (``true``) one after another, each started and awaited
the way the node agent does it, two ways alternating in rounds so both see the same
machine: **plain**, the unisolated wrapper (``processes.spawn``: a shell in a session of
its own), and **sandboxed** (``Sandbox.prepare`` — uid, working directory, cores,
cgroup — then the helper, then ``Sandbox.finish`` — cgroup removed, uid released).
Prints one JSON line:

- ``<way>_cpu_ms_per_task``: CPU of this process (the agent's share: prepare, finish)
  plus its reaped children (the helper, the task's processes), per task;
- ``<way>_start_ms_p50`` / ``_p99``: from the start of the launch to the end of the
  task (``true`` ends as it starts), as the agent sees it;
- ``sandbox_cpu_ms_extra`` / ``sandbox_start_ms_extra``: the difference, medians of rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from services.launcher.agent.processes import TaskFiles, spawn, spawn_sandboxed, wait_spawned
from services.launcher.agent.sandbox.sandbox import Sandbox, SandboxConfig, open_sandbox
from shared.jobs import Resources


def _cpu_s() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


async def _plain(scratch: Path, n: int) -> float:
    files = TaskFiles.for_attempt(scratch / "state", f"plain-{n}")
    work = scratch / "work" / "plain"
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    proc = await spawn("true", {"PATH": "/usr/bin:/bin"}, scratch / "logs" / "plain.log", files, work)
    await wait_spawned(proc, files)
    return time.perf_counter() - started


async def _sandboxed(sandbox: Sandbox, scratch: Path, n: int) -> float:
    attempt = f"bench-{n}"
    files = TaskFiles.for_attempt(scratch / "state", attempt)
    started = time.perf_counter()
    launch = sandbox.prepare(
        attempt_id=attempt,
        job_id=f"job-{n}",
        username="bench",
        resources=Resources(cpus=1, memory_mb=256),
        gpu_indices=[],
        workdir=scratch / "work" / f"job-{n}",
        log_path=scratch / "logs" / f"{attempt}.log",
        pid_file=files.pid_file,
        exit_file=files.exit_file,
        command="true",
    )
    proc = spawn_sandboxed(launch.argv, {"PATH": "/usr/bin:/bin", **launch.env})
    outcome = await wait_spawned(proc, files)
    elapsed = time.perf_counter() - started
    while not sandbox.finish(attempt, f"job-{n}"):  # noqa: ASYNC110 - the kernel says nothing when it is empty
        await asyncio.sleep(0.001)
    assert outcome.exit_code == 0, (scratch / "logs" / f"{attempt}.log").read_text()
    return elapsed


async def _measure(tasks: int, rounds: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="corral-bench-sandbox-") as directory:
        scratch = Path(directory)
        (scratch / "state").mkdir()
        (scratch / "logs").mkdir()
        sandbox = open_sandbox(
            SandboxConfig(
                node_id=f"bench-{os.getpid()}",
                hidden=(scratch / "state", scratch / "logs"),
                claims_dir=scratch / "claims",
                uid_range=(2130706432, 2130771967),
                run_as="dynamic",
                pids_max=4096,
            )
        )
        per_round: dict[str, list[float]] = {"plain_cpu": [], "sandboxed_cpu": []}
        starts: dict[str, list[float]] = {"plain": [], "sandboxed": []}
        count = 0
        for _ in range(rounds):
            for way in ("plain", "sandboxed"):
                cpu_before = _cpu_s()
                for _ in range(tasks // rounds):
                    count += 1
                    run = _plain(scratch, count) if way == "plain" else _sandboxed(sandbox, scratch, count)
                    starts[way].append(await run * 1000)
                per_round[f"{way}_cpu"].append((_cpu_s() - cpu_before) * 1000 / (tasks // rounds))
        sandbox.close()

    def percentile(values: list[float], q: int) -> float:
        return round(statistics.quantiles(values, n=100)[q - 1], 2)

    result: dict[str, object] = {"tasks_each_way": len(starts["plain"]), "rounds": rounds}
    for way in ("plain", "sandboxed"):
        result[f"{way}_cpu_ms_per_task"] = round(statistics.median(per_round[f"{way}_cpu"]), 3)
        result[f"{way}_start_ms_p50"] = percentile(starts[way], 50)
        result[f"{way}_start_ms_p99"] = percentile(starts[way], 99)
    result["sandbox_cpu_ms_extra"] = round(
        statistics.median(
            s - p_ for s, p_ in zip(per_round["sandboxed_cpu"], per_round["plain_cpu"], strict=True)
        ),
        3,
    )
    result["sandbox_start_ms_extra"] = round(
        statistics.median(starts["sandboxed"]) - statistics.median(starts["plain"]), 3
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sandbox", description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=600, help="tasks each way")
    parser.add_argument("--rounds", type=int, default=6, help="alternations of the two ways")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench.sandbox: the sandbox needs root (run it as root)", file=sys.stderr)
        return 2
    print(json.dumps(asyncio.run(_measure(args.tasks, args.rounds))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
