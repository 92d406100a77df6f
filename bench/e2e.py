"""End-to-end throughput and start latency of the whole stack (``python -m bench.e2e``).

Starts a private stack as ``make up`` does (simulated GPUs), submits ``--jobs`` trivial
one-GPU jobs (``true``) through the HTTP API with ``--concurrency`` clients, waits until
every job has ended, and prints one JSON line:

- ``jobs_per_s``: jobs finished per second, first submit to last finish;
- ``start_latency_p50_ms`` / ``_p99_ms``: submit accepted (the job row's creation) to the
  task's process started (the attempt's ``started_at``), both stamped by Postgres' clock,
  measured on an idle cluster by ``--probes`` jobs submitted one at a time (so it is the
  platform's own latency, not time spent queueing for a GPU), once the node has
  registered its GPUs (else the first probe would measure the node's start-up), each
  probe once the one before has ended;
- ``end_latency_p50_ms`` / ``_p99_ms``: the same probes' submit accepted to the job
  ended (``finished_at``: SUCCEEDED recorded), the measure of Ray's ~1.4 s from submit
  to a trivial job's end, the reference point for a job's overhead;
- ``loaded_start_latency_p50_ms`` / ``_p99_ms``: the same during the throughput run, where
  1000 jobs compete for 8 GPUs and most of it is queueing;
- ``submit_p50_ms`` / ``_p99_ms``: HTTP round trip of a submit, seen by the client;
- ``cpu_ms_per_job``: CPU each service process (the agent with the tasks it ran) and
  Postgres and NATS spent per job during the throughput run;
- ``stages``: the pipeline stage by stage, each job's first attempt, timed by Postgres'
  clock: ``submit→placed`` (the job row to its placement's rows), ``placed→assigned``
  (to its attempt's row), ``assigned→started`` (to its process started) and
  ``exited→decided`` (its process's end to the job's end). Each has
  ``wall_ms_per_job``, the mean time a job spent in it, against ``cpu_ms_per_job``, the
  CPU the processes doing that stage spent per job (named in ``processes``; the launcher
  does two stages, and its CPU is counted in both; Postgres and NATS serve every stage
  and are in ``cpu_ms_per_job`` above). A stage whose wall time far exceeds its CPU time
  is waiting in line. ``submit→placed`` includes waiting for a free GPU: with fewer GPUs
  than jobs in flight, most of it is queueing. Rows are stamped with their transaction's
  start (``now()``), so a launcher transaction's wait for its nodes' locks counts in
  ``assigned→started``, and a cycle's transaction begun before the job committed shortens
  ``submit→placed``.

``--nodes N`` runs N simulated nodes of ``--gpus`` GPUs each (``CORRAL_SIMULATED_NODES``),
one node agent each; ``--api-processes N`` that many API processes sharing the port
(``CORRAL_API_PROCESSES``); ``--launcher-processes N`` that many launchers sharing the
work (``CORRAL_LAUNCHER_PROCESSES``); ``--set NAME=VALUE`` passes any ``CORRAL_*`` setting to the
services (an A/B of one setting on one tree).

``--statements N`` loads pg_stat_statements into the private Postgres and prints (to
stderr) the N statements that took Postgres longest during the throughput run, with
their calls and rows; the JSON line then carries ``postgres_statement_ms_per_job``.

``--runs N`` runs it N times, each on a fresh stack, ``--pause-s`` apart (30 s: run back
to back, a shared machine can slow down run after run, docs/performance.md), prints each run's
line to stderr, and prints the medians (``jobs_per_s_each_run`` lists every run's).

``--with-slurm`` also runs the Slurm peer (../shared/peers/slurm: setup.sh then
bench.sh N, as root) in the same run, so both figures come from one machine, one time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench.api_clients import spawn_client
from bench.stack import BenchStack, private_stack

SLURM_DIR = Path(__file__).resolve().parents[2] / "shared" / "peers" / "slurm"


JOB = {"name": "bench", "tasks": [{"name": "main", "command": "true", "resources": {"gpus": 1}}]}


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def _submit_all(stack: BenchStack, jobs: int, concurrency: int) -> list[float]:
    """Submit ``jobs`` jobs over ``concurrency`` keep-alive connections; their round trips.

    The load comes from ``bench.api_clients`` in a process of its own: an httpx client
    in this process would cost about as much CPU per submit as the API's side of it
    (bench/api_clients.py), taken from the stack it measures."""
    spec = {
        "host": "127.0.0.1",
        "port": stack.port,
        "token": stack.token(),
        "body": JOB,
        "submits": jobs,
        "warmup": 0,
        "concurrency": concurrency,
    }
    out, _ = await (await spawn_client("submit", spec)).communicate()
    result = json.loads(out.decode().strip().splitlines()[-1])
    accepted = result["statuses"].get("201", 0)
    if accepted != jobs:
        raise RuntimeError(f"only {accepted} of {jobs} submits were accepted: {result['errors']}")
    round_trips: list[float] = result["round_trips_ms"]
    return round_trips


async def _wait_all_ended(conn: asyncpg.Connection, jobs: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ended = await conn.fetchval(
            "SELECT count(*) FROM api.jobs WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')"
        )
        if ended >= jobs:
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"only {ended} of {jobs} jobs ended in {timeout_s}s")


async def _probe(stack: BenchStack, conn: asyncpg.Connection, probes: int) -> tuple[list[float], list[float]]:
    """Submit jobs one at a time on an idle cluster, each once the one before has ended:
    each one's submit → process start, and submit → job ended."""
    spec = {**JOB, "name": "probe"}
    headers = {"Authorization": f"Bearer {stack.token()}"}
    started, ended = [], []
    async with httpx.AsyncClient(base_url=stack.base_url, headers=headers, timeout=30) as http:
        for _ in range(probes):
            job_id = (await http.post("/api/v1/jobs", json=spec)).raise_for_status().json()["id"]
            for _ in range(2000):
                row = await conn.fetchrow(
                    """SELECT extract(epoch FROM a.started_at - j.created_at) * 1000 AS started_ms,
                              extract(epoch FROM j.finished_at - j.created_at) * 1000 AS ended_ms
                       FROM api.jobs j JOIN launcher.attempts a ON a.job_id = j.id
                       WHERE j.id = $1 AND j.finished_at IS NOT NULL""",
                    job_id,
                )
                if row is not None:
                    if row["started_ms"] is None:
                        raise RuntimeError(f"probe job {job_id} ended without starting: see its attempts")
                    started.append(float(row["started_ms"]))
                    ended.append(float(row["ended_ms"]))
                    break
                await asyncio.sleep(0.005)  # (when the next probe goes: not what is measured)
            else:
                raise TimeoutError(f"probe job {job_id} did not end within 10 s")
    return started, ended


async def _top_statements(conn: asyncpg.Connection, top: int, jobs: int) -> float:
    """Print the ``top`` statements by Postgres time since the reset; their total per job."""
    rows = await conn.fetch(
        """SELECT calls, rows, total_exec_time AS ms, regexp_replace(query, '\\s+', ' ', 'g') AS query
           FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'
           ORDER BY total_exec_time DESC"""
    )
    total_ms = sum(float(r["ms"]) for r in rows)
    calls = sum(int(r["calls"]) for r in rows)
    print(
        f"Postgres statement time {total_ms:.0f} ms over {jobs} jobs, {calls / jobs:.1f} statements per job;"
        f" the top {top}:",
        file=sys.stderr,
    )
    for r in rows[:top]:
        line = f"{r['ms']:9.0f} ms {r['calls']:7d} calls {r['rows']:8d} rows | {r['query'][:150]}"
        print(line, file=sys.stderr)
    return total_ms / jobs


# Each stage: the timestamps it runs between (columns of ``_STAGE_TIMES``), and the
# processes doing its work (``cpu_by_process`` names; ``agent`` stands for every node's).
STAGES = {
    "submit→placed": ("submitted", "placed", ("api", "scheduler")),
    "placed→assigned": ("placed", "assigned", ("launcher",)),
    "assigned→started": ("assigned", "started", ("agent",)),
    "exited→decided": ("exited", "decided", ("launcher",)),
}
_STAGE_TIMES = """
    SELECT j.created_at AS submitted,
           (SELECT min(al.created_at) FROM scheduler.allocations al
            WHERE al.job_id = j.id AND al.generation = a.generation) AS placed,
           a.created_at AS assigned, a.started_at AS started, a.finished_at AS exited,
           j.finished_at AS decided
    FROM api.jobs j JOIN launcher.attempts a ON a.job_id = j.id AND a.attempt_no = 1"""


async def _stages(conn: asyncpg.Connection, cpu_ms_per_job: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Each stage's mean wall time per job against the CPU per job of its processes."""
    means = ", ".join(
        f'avg(extract(epoch FROM {end} - {start})) * 1000 AS "{name}"'
        for name, (start, end, _) in STAGES.items()
    )
    row = await conn.fetchrow(f"SELECT {means} FROM ({_STAGE_TIMES}) AS t")  # noqa: S608 - our own names
    assert row is not None
    stages: dict[str, dict[str, Any]] = {}
    for name, (_, _, processes) in STAGES.items():
        cpu = sum(ms for process, ms in cpu_ms_per_job.items() if process.split("-")[0] in processes)
        wall = row[name]
        stages[name] = {
            "wall_ms_per_job": None if wall is None else round(float(wall), 2),
            "cpu_ms_per_job": round(cpu, 2),
            "processes": list(processes),
        }
    return stages


async def _forget_the_probes(conn: asyncpg.Connection) -> None:
    """Empty the job tables, so the run's figures count its own jobs only. TRUNCATE's
    exclusive locks, taken table by table, can deadlock with a service reading two of
    them in the other order (the scheduler's cycle runs on); Postgres then cancels one
    side, sometimes this one: try again."""
    for attempt in range(5):
        try:
            await conn.execute("TRUNCATE launcher.attempts, scheduler.allocations, api.jobs CASCADE")
            return
        except asyncpg.DeadlockDetectedError:
            if attempt == 4:
                raise
            await asyncio.sleep(0.1)


async def measure(
    stack: BenchStack, jobs: int, concurrency: int, probes: int, statements: int = 0
) -> dict[str, Any]:
    conn = await asyncpg.connect(stack.database_url())
    try:
        probe_latencies, probe_ends = await _probe(stack, conn, probes)
        await _forget_the_probes(conn)
        if statements:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            await conn.execute("SELECT pg_stat_statements_reset()")
        cpu_before = stack.cpu_by_process()
        wall_started = time.perf_counter()
        round_trips = await _submit_all(stack, jobs, concurrency)
        await _wait_all_ended(conn, jobs, timeout_s=max(120.0, jobs * 0.5))
        wall = time.perf_counter() - wall_started
        cpu_after = stack.cpu_by_process()
        row = await conn.fetchrow(
            """SELECT extract(epoch FROM max(finished_at) - min(created_at)) AS span,
                      count(*) FILTER (WHERE state <> 'SUCCEEDED') AS not_ok
               FROM api.jobs"""
        )
        statement_ms = await _top_statements(conn, statements, jobs) if statements else None
        latencies = [
            float(r["ms"])
            for r in await conn.fetch(
                """SELECT extract(epoch FROM a.started_at - j.created_at) * 1000 AS ms
                   FROM api.jobs j JOIN launcher.attempts a ON a.job_id = j.id AND a.attempt_no = 1"""
            )
        ]
        cpu_ms_per_job = {
            name: round((cpu_after[name] - cpu_before[name]) * 1000 / jobs, 2)
            for name in sorted(cpu_after)
            if name in cpu_before
        }
        stages = await _stages(conn, cpu_ms_per_job)
    finally:
        await conn.close()
    assert row is not None
    return {
        "jobs": jobs,
        "concurrency": concurrency,
        "jobs_per_s": round(jobs / float(row["span"]), 1),
        "start_latency_p50_ms": round(statistics.median(probe_latencies), 1),
        "start_latency_p99_ms": round(_percentile(probe_latencies, 0.99), 1),
        "end_latency_p50_ms": round(statistics.median(probe_ends), 1),
        "end_latency_p99_ms": round(_percentile(probe_ends, 0.99), 1),
        "loaded_start_latency_p50_ms": round(statistics.median(latencies), 1),
        "loaded_start_latency_p99_ms": round(_percentile(latencies, 0.99), 1),
        "submit_p50_ms": round(statistics.median(round_trips), 1),
        "submit_p99_ms": round(_percentile(round_trips, 0.99), 1),
        "failed_jobs": int(row["not_ok"]),
        "wall_s": round(wall, 2),
        # What a job cost each process, in CPU: the figure to compare on a shared machine.
        "cpu_ms_per_job": cpu_ms_per_job,
        "stages": stages,
        **({"postgres_statement_ms_per_job": round(statement_ms, 2)} if statement_ms is not None else {}),
    }


def run_slurm_peer(jobs: int) -> dict[str, Any]:
    if os.geteuid() != 0 or not (SLURM_DIR / "bench.sh").exists():
        return {"error": "the Slurm peer needs root and ../shared/peers/slurm"}
    subprocess.run(["bash", str(SLURM_DIR / "setup.sh")], check=True, capture_output=True, timeout=600)
    try:
        output = subprocess.run(
            ["bash", str(SLURM_DIR / "bench.sh"), str(jobs)],
            check=True,
            capture_output=True,
            text=True,
            timeout=1200,
        ).stdout
    finally:
        _stop_slurm_peer()
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return result


def _stop_slurm_peer() -> None:
    """Stop the daemons setup.sh started (it leaves them running, and stops them itself
    only on its next run): a benchmark leaves nothing behind."""
    # setup.sh's own default, where it writes the pid files (not a file we create).
    home = Path(os.environ.get("SLURM_BENCH_DIR", "/tmp/slurm-bench"))  # noqa: S108
    for pid_file in (home / "ctld.pid", home / "d.pid"):
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--gpus", type=int, default=8, help="simulated GPUs on each node")
    parser.add_argument("--nodes", type=int, default=1, help="simulated nodes, one agent each")
    parser.add_argument("--api-processes", type=int, default=1, help="API processes sharing the port")
    parser.add_argument(
        "--launcher-processes", type=int, default=1, help="launcher processes sharing the work"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for the stack's services (repeatable), e.g. CORRAL_LAUNCHER_PLACEMENT_CONCURRENCY=1",
    )
    parser.add_argument("--probes", type=int, default=50, help="one-at-a-time jobs for start latency")
    parser.add_argument("--with-slurm", action="store_true", help="also measure the Slurm peer in this run")
    parser.add_argument(
        "--statements", type=int, default=0, metavar="N", help="print the N statements Postgres spent most on"
    )
    parser.add_argument("--keep", action="store_true", help="keep the stack's home (logs) for a post-mortem")
    parser.add_argument(
        "--runs", type=int, default=1, help="runs, each on a stack of its own; prints their medians"
    )
    parser.add_argument(
        "--pause-s", type=float, default=30.0, help="rest between runs (this machine slows down under load)"
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.pause_s < 0 or args.nodes < 1:
        parser.error("--runs and --nodes must be at least 1, and --pause-s at least 0")
    if any(not s.startswith("CORRAL_") or "=" not in s for s in args.set):
        parser.error("--set takes NAME=VALUE, NAME a CORRAL_* setting")
    results = []
    for run in range(args.runs):
        if run:
            time.sleep(args.pause_s)
        results.append(_run_once(args))
        if args.runs > 1:
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    result = results[0] if args.runs == 1 else medians_of(results)
    if args.with_slurm:
        result["slurm"] = run_slurm_peer(min(args.jobs, 200))
    print(json.dumps(result), flush=True)
    return 0


def _run_once(args: argparse.Namespace) -> dict[str, Any]:
    # With --statements, the private Postgres loads pg_stat_statements.
    extra_env = {"CORRAL_PG_STATEMENTS": "1"} if args.statements else {}
    extra_env["CORRAL_API_PROCESSES"] = str(args.api_processes)
    extra_env["CORRAL_LAUNCHER_PROCESSES"] = str(args.launcher_processes)
    extra_env.update(setting.split("=", 1) for setting in args.set)
    with private_stack(gpus=args.gpus, nodes=args.nodes, keep=args.keep, extra_env=extra_env) as stack:
        stack.wait_for_gpus(args.gpus, nodes=args.nodes)  # an idle cluster: its nodes registered
        result = asyncio.run(measure(stack, args.jobs, args.concurrency, args.probes, args.statements))
    shape = {
        "gpus": args.gpus,
        "nodes": args.nodes,
        "api_processes": args.api_processes,
        "launcher_processes": args.launcher_processes,
    }
    return {"bench": "e2e", **shape, **result}


def medians_of(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs as one line: each figure's median over the runs (per process for the
    CPU), failed jobs summed, and every run's throughput as measured."""
    merged: dict[str, Any] = {}
    for key, value in results[0].items():
        if key == "failed_jobs":
            merged[key] = sum(r[key] for r in results)
        elif isinstance(value, dict):
            merged[key] = {name: _median_of([r[key][name] for r in results]) for name in value}
        elif isinstance(value, float):
            merged[key] = round(statistics.median(r[key] for r in results), 2)
        else:
            merged[key] = value
    merged["runs"] = len(results)
    merged["jobs_per_s_each_run"] = [r["jobs_per_s"] for r in results]
    return merged


def _median_of(values: list[Any]) -> Any:
    """The median of a figure over runs; of each figure, for a stage's (None: not measured)."""
    if isinstance(values[0], dict):
        return {key: _median_of([v[key] for v in values]) for key in values[0]}
    numbers = [v for v in values if isinstance(v, int | float)]
    if not numbers:
        return values[0]
    return round(statistics.median(numbers), 2)


if __name__ == "__main__":
    sys.exit(main())
