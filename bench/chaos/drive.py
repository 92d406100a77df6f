"""One chaos run from start to verdict: the stack, the observers, the drive, the settle.

Time: ``--minutes`` bounds the run from the harness's start to its judgement (stopping
the stack comes after; an API that does not answer at the end is given
``GATHER_MIN_S`` more, and what it still does not show counts as lost). Once the stack
is up, the first ``DRIVE_SHARE`` of what is left is the *drive window*, over which the
jobs are submitted and the faults are spread; the rest is for the settle: every job
ended, and both observers caught up.

Faults come one at a time. The next waits for its planned moment (the window split in
equal slots, a seeded moment in the first half of each), and for the recovery of the
one before: a submit accepted after it (``RECOVERY_WAIT_S`` at most), so each recovery
is the time of one fault alone. The first cycle through the kinds is always finished,
even past the window, so every run has every kind; later cycles stop with the window.

Concurrency: one event loop. The webhook receiver, the SSE subscriber, the submitter and
the fault loop are tasks of one ``TaskGroup``; the two observers run until the evidence
is in and are then stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from bench.chaos.faults import BURST_JOBS, Hands, schedule
from bench.chaos.jobs import JOB_NAME, JobPlan, Submitter, plan_jobs
from bench.chaos.ledger import read_copies, still_alive
from bench.chaos.observers import EventWatcher, WebhookReceiver
from bench.chaos.verdict import ENDED, Evidence
from bench.stack import BenchStack, private_stack

LEASE_S = 3.0
NODES = 2
# Short loops, as a user would turn them for a small cluster (the e2e tests' values), so
# recovery is a matter of seconds; the API's SSE keep-alive is what lets the subscriber
# tell a dead stream from a quiet one, and the webhook lease how soon a delivery cut
# short by an API kill is sent again.
FAST_ENV = {
    "CORRAL_SIMULATED_NODES": str(NODES),
    "CORRAL_AGENT_LEASE_S": str(LEASE_S),
    "CORRAL_SCHEDULER_CYCLE_INTERVAL_S": "0.5",
    "CORRAL_SCHEDULER_LEADER_RETRY_S": "0.5",
    "CORRAL_LAUNCHER_RECONCILE_INTERVAL_S": "1",
    "CORRAL_AGENT_RECONCILE_INTERVAL_S": "1",
    "CORRAL_MONITOR_FLUSH_INTERVAL_S": "0.2",
    "CORRAL_MONITOR_TOUCH_INTERVAL_S": "1",
    "CORRAL_MONITOR_READINGS_INTERVAL_S": "1",
    "CORRAL_HEALTH_LIVENESS_INTERVAL_S": "1",
    "CORRAL_API_SSE_KEEPALIVE_S": "1",
    "CORRAL_API_WEBHOOK_LEASE_S": "5",
}
# How long two copies of a task may overlap when a lost lease explains it: the lease,
# then the returning agent's reconcile and the kill.
OVERLAP_MARGIN_S = 3.0
# The task a partition freezes: longer than the lease, the freeze and the move together,
# so its stale copy is still running when its agent returns.
LONG_JOB_S = 3 * LEASE_S + 4
DRIVE_SHARE = 0.6
MEAN_GAP_S = 8.0
RECOVERY_WAIT_S = 30.0
GATHER_MIN_S = 10.0
POLL_S = 0.5

T = TypeVar("T")


@dataclass(frozen=True)
class Options:
    jobs: int
    minutes: float
    seed: int
    kinds: tuple[str, ...]
    keep: bool = False


def say(message: str) -> None:
    print(f"chaos: {message}", file=sys.stderr, flush=True)


def run(options: Options) -> Evidence:
    """The run's evidence (judging it is ``verdict``'s)."""
    started = time.monotonic()
    with private_stack(extra_env=FAST_ENV, keep=options.keep) as stack:
        say(f"stack up in {time.monotonic() - started:.1f} s at {stack.home}")
        _wait_nodes(stack)
        evidence = asyncio.run(_drive(stack, options, started))
        evidence.duration_s = time.monotonic() - started
    return evidence


async def _drive(stack: BenchStack, options: Options, started: float) -> Evidence:
    end = started + options.minutes * 60
    window_end = time.monotonic() + DRIVE_SHARE * max(0.0, end - time.monotonic())
    rngs = {part: random.Random(f"{options.seed}-{part}") for part in ("jobs", "submits", "faults")}
    order = schedule(rngs["faults"], options.kinds, math.floor((window_end - time.monotonic()) / MEAN_GAP_S))
    paced, reserves = _plan(rngs["jobs"], options.jobs, order)
    plans = paced + [plan for pool in reserves.values() for plan in pool]
    headers = {"Authorization": f"Bearer {stack.token()}"}
    async with (
        httpx.AsyncClient(base_url=stack.base_url, headers=headers, timeout=10) as http,
        httpx.AsyncClient(base_url=stack.base_url, headers=headers) as sse_http,
    ):
        receiver, watcher = WebhookReceiver(), EventWatcher(sse_http)
        submitter = Submitter(http, paced, rngs["submits"], reserves)
        hands = Hands(stack.home, rngs["faults"], LEASE_S, watcher, submitter, say)
        async with asyncio.TaskGroup() as group:
            group.create_task(receiver.serve())
            following = group.create_task(watcher.run())
            if await _retry(lambda: receiver.subscribe(http), time.monotonic() + 30) is None:
                raise RuntimeError("the API did not take the webhook subscription within 30 s")
            if not await watcher.wait_connected(30):
                raise RuntimeError("the SSE stream did not connect within 30 s")
            submitting = group.create_task(submitter.run(window_end))
            if not await watcher.wait_cursor(30):
                raise RuntimeError("the SSE stream sent no event within 30 s of the first submit")
            say(f"{len(order)} faults over {window_end - time.monotonic():.0f} s: {' '.join(order)}")
            try:
                async with asyncio.timeout(max(1.0, end - time.monotonic())):
                    await _inject(hands, order, window_end)
                    await submitting
                    await submitter.finish()
                    await _settle(http, submitter, watcher, receiver, end)
            except TimeoutError:
                say("the time ran out before every job ended and was seen")
                submitting.cancel()
            gathered = (submitter, hands, watcher, receiver)
            evidence = await _gather(stack, http, gathered, plans, options.seed, end)
            receiver.stop()
            following.cancel()
    return evidence


def _plan(rng: random.Random, jobs: int, order: list[str]) -> tuple[list[JobPlan], dict[str, list[JobPlan]]]:
    """The paced jobs, and those kept for the faults that need jobs of their own (from
    the end of the plan, a third of the jobs at most, so most are paced over the window)."""
    long = min(order.count("agent-partition"), jobs // 6)
    burst = max(0, min(order.count("nats-server-after-burst") * BURST_JOBS, jobs // 3 - long))
    plans = plan_jobs(rng, jobs, long=long, long_s=LONG_JOB_S)
    paced = plans[: jobs - long - burst]
    return paced, {
        "nats-server-after-burst": plans[jobs - long - burst : jobs - long],
        "agent-partition": plans[jobs - long :],
    }


async def _inject(hands: Hands, order: list[str], window_end: float) -> None:
    first_cycle = len(set(order))
    slot = max(0.0, window_end - time.monotonic()) / max(1, len(order))
    begin = time.monotonic()
    for number, kind in enumerate(order):
        if number >= first_cycle and time.monotonic() >= window_end:
            break
        planned = begin + slot * (number + hands.rng.uniform(0.0, 0.5))
        await asyncio.sleep(max(0.0, planned - time.monotonic()))
        await hands.do(kind)
        if hands.kills:
            await hands.submitter.accepted_since(hands.kills[-1].at, RECOVERY_WAIT_S)


async def _settle(
    http: httpx.AsyncClient,
    submitter: Submitter,
    watcher: EventWatcher,
    receiver: WebhookReceiver,
    end: float,
) -> None:
    """Until every job has ended and both observers have its terminal event."""
    ids = {s.job_id for s in submitter.submissions if s.job_id}
    while time.monotonic() < end:
        states = await _states(http)
        ended = {job for job in ids if states.get(job) in ENDED}
        if ended == ids and ended <= watcher.terminal.keys() and ended <= receiver.terminal.keys():
            return
        await asyncio.sleep(POLL_S)


async def _states(http: httpx.AsyncClient) -> dict[str, str]:
    """Every job of the run as the API lists it (empty while the API does not answer)."""
    states: dict[str, str] = {}
    cursor: str | None = None
    try:
        while True:
            params: dict[str, Any] = {"name": JOB_NAME, "limit": 500} | ({"cursor": cursor} if cursor else {})
            page = (await http.get("/api/v1/jobs", params=params)).raise_for_status().json()
            states.update({job["id"]: job["state"] for job in page["items"]})
            cursor = page.get("next_cursor")
            if not cursor:
                return states
    except (httpx.HTTPError, ValueError):
        return {}


async def _gather(
    stack: BenchStack,
    http: httpx.AsyncClient,
    parts: tuple[Submitter, Hands, EventWatcher, WebhookReceiver],
    plans: list[JobPlan],
    seed: int,
    end: float,
) -> Evidence:
    """What the run saw and what the API says now; an API that does not answer by
    ``end`` (``GATHER_MIN_S`` at least) leaves its jobs unseen: lost."""
    submitter, hands, watcher, receiver = parts
    deadline = max(end, time.monotonic() + GATHER_MIN_S)
    held = await _retry(lambda: _listed(http), deadline)
    jobs = {}
    for job_id in (s.job_id for s in submitter.submissions if s.job_id):
        job = await _retry(functools.partial(_job, http, job_id), deadline)
        if job is not None:
            jobs[job_id] = job
    if held is None or len(jobs) < len(submitter.submissions):
        say("the API did not answer in time: the jobs it did not show count as lost")
    work = stack.home / "work"
    alive = await asyncio.to_thread(still_alive, work)
    return Evidence(
        seed=seed,
        plans=plans,
        submissions=submitter.submissions,
        jobs=jobs,
        jobs_held=held or 0,
        copies=read_copies(work),
        alive=alive,
        ledger_now=time.time(),
        sse_terminal=dict(watcher.terminal),
        webhook_terminal=dict(receiver.terminal),
        kills=hands.kills,
        accepted_at=list(submitter.accepted_at),
        allowed_overlap_s=LEASE_S + OVERLAP_MARGIN_S,
        duration_s=0.0,
        extra={
            "skipped_faults": hands.skipped,
            "sse_connects": watcher.connects,
            "duplicate_events": watcher.duplicates,
            "duplicate_webhooks": receiver.duplicates,
        },
    )


async def _listed(http: httpx.AsyncClient) -> int:
    states = await _states(http)
    if not states:
        raise httpx.TransportError("the API listed no jobs")
    return len(states)


async def _job(http: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = (await http.get(f"/api/v1/jobs/{job_id}")).raise_for_status().json()
    return job


async def _retry(call: Callable[[], Awaitable[T]], deadline: float = math.inf) -> T | None:
    """``call()`` until it answers (the API may be restarting from the last fault), or
    None once ``deadline`` (time.monotonic()) has passed."""
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            return await call()
        await asyncio.sleep(POLL_S)
    return None


def _wait_nodes(stack: BenchStack, timeout_s: float = 60.0) -> None:
    """Both simulated nodes READY, so the first jobs have somewhere to run."""
    headers = {"Authorization": f"Bearer {stack.token()}"}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        nodes = httpx.get(f"{stack.base_url}/api/v1/nodes", headers=headers, timeout=5).json()["items"]
        if sum(n["state"] == "READY" for n in nodes) >= NODES:
            return
        time.sleep(0.1)
    raise RuntimeError(f"{NODES} nodes were not READY within {timeout_s:.0f} s")
