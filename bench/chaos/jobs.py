"""The jobs of a chaos run, what each deserves, and the submitter that gets them in.

A job is one role of one or two instances (a gang of two when the spec allows it: it
does, and gang is the default), one GPU each, whose command is a shell loop writing to
the ledger (``ledger.py`` reads it back): ``start``, a heartbeat every ``BEAT_S`` for a
seeded 0.5 to 3 s, then ``end``, then exit 0 — or exit 3, which Corral's exit-code table
calls ``unknown``, and with ``max_retries: 0`` (the default, written out so the reason
shows) such a job deserves FAILED. A job moved off a lost node is retried with no
backoff (``backoff_s: 0``), so the move overlaps its stale copy and the fence shows. A
few jobs run longer, kept for the partitions: a frozen node's task must outlive the
freeze for its stale copy to be seen at all. Each record is one short line appended
with ``>>`` (O_APPEND, under the pipe-buffer size): copies of a task on two nodes, or
two instances of a gang in one directory, never interleave within a line.

The submitter paces the jobs evenly over the drive window, with seeded jitter, and is
nudged to submit at once after every fault, which is how recovery is measured (a kill
to the next submit Corral accepts). Once every job is in, a nudge sends a replay of the
last submit instead: the same body and ``Idempotency-Key``, which Corral answers with
the first job and creates nothing. Every submit is retried on any transport error or
5xx/429 with its key unchanged until it is accepted, so a submit whose answer was lost
(the API killed mid-request) is never doubled.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

BEAT_S = 0.2
FAILING_EXIT = 3
JOB_NAME = "chaos"
RETRY_AFTER_S = 0.25
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class JobPlan:
    number: int
    instances: int
    beats: int  # heartbeats before the end record
    exit_code: int

    @property
    def key(self) -> str:
        return f"chaos-{self.number}"

    @property
    def deserved(self) -> str:
        return "SUCCEEDED" if self.exit_code == 0 else "FAILED"

    def spec(self) -> dict[str, Any]:
        return {
            "name": JOB_NAME,
            "tasks": [
                {
                    "name": "main",
                    "instances": self.instances,
                    "command": task_command(self.beats, self.exit_code),
                    "resources": {"gpus": 1},
                }
            ],
            "retry": {"max_retries": 0, "backoff_s": 0},
        }


def task_command(beats: int, exit_code: int) -> str:
    """The task: ledger records ``<kind> <job> <role> <index> <attempt id> <attempt no>
    <wall-clock time>``, relative to its working directory (its own on each node)."""
    record = (
        'r() { echo "$1 $CORRAL_JOB_ID $CORRAL_TASK_ROLE $CORRAL_TASK_INDEX $CORRAL_ATTEMPT_ID'
        ' $CORRAL_ATTEMPT $(date +%s.%N)" >> ledger; }'
    )
    loop = f"i=0; while [ $i -lt {beats} ]; do sleep {BEAT_S}; r hb; i=$((i+1)); done"
    return f"{record}; r start; {loop}; r end; exit {exit_code}"


def plan_jobs(rng: random.Random, count: int, long: int = 0, long_s: float = 10.0) -> list[JobPlan]:
    """Most succeed, about one in five fails, about one in five is a gang of two; the
    last ``long`` of them run ``long_s`` (a task that outlives a partition)."""
    plans = []
    for number in range(count):
        seconds = long_s if number >= count - long else rng.uniform(0.5, 3.0)
        plans.append(
            JobPlan(
                number=number,
                instances=2 if rng.random() < 0.2 else 1,
                beats=max(1, round(seconds / BEAT_S)),
                exit_code=FAILING_EXIT if rng.random() < 0.2 else 0,
            )
        )
    return plans


@dataclass
class Submission:
    plan: JobPlan
    job_id: str | None = None
    sent_at: float = 0.0  # time.monotonic() of the first try
    accepted_at: float | None = None
    tries: int = 0


@dataclass
class Submitter:
    """Submits ``paced`` over the window; ``reserves`` wait for a fault to ask (``take``,
    ``burst``) and are submitted by ``finish`` if none did."""

    http: httpx.AsyncClient
    paced: list[JobPlan]
    rng: random.Random
    reserves: dict[str, list[JobPlan]] = field(default_factory=dict)
    submissions: list[Submission] = field(default_factory=list)
    accepted_at: list[float] = field(default_factory=list)  # every accepted submit, replays too
    nudge: asyncio.Event = field(default_factory=asyncio.Event)
    _accepted: asyncio.Event = field(default_factory=asyncio.Event)
    _pending: list[JobPlan] = field(init=False)

    def __post_init__(self) -> None:
        self._pending = list(self.paced)

    async def run(self, until: float) -> None:
        """Submit the paced jobs until ``until`` (time.monotonic()), then what is left
        at once; answer nudges all along (the fault loop's "measure recovery now")."""
        if self._pending:  # the first at once: the observers need an event to resume from
            await self.submit(self._pending.pop(0))
        while self._pending or time.monotonic() < until:
            if self._pending:
                share = max(0.0, until - time.monotonic()) / len(self._pending)
                wait = share * self.rng.uniform(0.5, 1.5)
            else:
                wait = max(0.0, until - time.monotonic())
            nudged = True
            try:
                await asyncio.wait_for(self.nudge.wait(), wait)
            except TimeoutError:
                nudged = False
            self.nudge.clear()
            if self._pending:
                await self.submit(self._pending.pop(0))
            elif nudged and self.submissions:
                await self.replay()

    def take(self, reserve: str, count: int = 1) -> list[JobPlan]:
        """Up to ``count`` plans of a reserve, no longer to be submitted by anyone else."""
        pool = self.reserves.get(reserve, [])
        taken, self.reserves[reserve] = pool[:count], pool[count:]
        return taken

    async def burst(self, reserve: str, size: int) -> int:
        """Submit up to ``size`` plans of a reserve at once; how many (all accepted on return)."""
        taken = self.take(reserve, size)
        await asyncio.gather(*(self.submit(plan) for plan in taken))
        return len(taken)

    async def finish(self) -> None:
        """Submit whatever is still waiting (a reserve whose fault never came)."""
        left = self._pending + [plan for pool in self.reserves.values() for plan in pool]
        self._pending, self.reserves = [], {}
        for plan in left:
            await self.submit(plan)

    async def submit(self, plan: JobPlan) -> Submission:
        submission = Submission(plan, sent_at=time.monotonic())
        self.submissions.append(submission)
        submission.job_id = await self._post(plan, submission)
        submission.accepted_at = time.monotonic()
        self._record_accepted(submission.accepted_at)
        return submission

    async def replay(self) -> None:
        """The last job's submit again: answered with that job, creating nothing."""
        last = self.submissions[-1]
        job_id = await self._post(last.plan, Submission(last.plan))
        if job_id != last.job_id:
            raise RuntimeError(f"a replayed submit gave {job_id}, the first one gave {last.job_id}")
        self._record_accepted(time.monotonic())

    def _record_accepted(self, at: float) -> None:
        self.accepted_at.append(at)
        self._accepted.set()

    async def accepted_since(self, since: float, timeout_s: float) -> bool:
        """Until a submit is accepted at or after ``since`` (or ``timeout_s`` passed)."""
        deadline = time.monotonic() + timeout_s
        while not any(t >= since for t in self.accepted_at):
            self._accepted.clear()
            try:
                await asyncio.wait_for(self._accepted.wait(), deadline - time.monotonic())
            except TimeoutError:
                return False
        return True

    async def _post(self, plan: JobPlan, submission: Submission) -> str:
        headers = {"Idempotency-Key": plan.key}
        while True:
            submission.tries += 1
            try:
                response = await self.http.post("/api/v1/jobs", json=plan.spec(), headers=headers)
            except httpx.TransportError:
                await asyncio.sleep(RETRY_AFTER_S)
                continue
            if response.status_code == 201:
                job_id: str = response.json()["id"]
                return job_id
            if response.status_code not in RETRIED_STATUSES:
                raise RuntimeError(f"submit {plan.key} refused: {response.status_code} {response.text[:300]}")
            await asyncio.sleep(RETRY_AFTER_S)
